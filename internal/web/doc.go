// Package web is gosleuth web's dashboard: one page, served from the
// binary, with the process list and, for one process, live charts at 1 s,
// the doctor's findings, exact syscall counts on demand and flame graphs.
//
// # Sampling
//
// Each watched process has one sampler, shared by every viewer, which runs
// while a page shows it (and Config.Linger after) and keeps Config.History
// of points in memory; pages read the history once (/api/history) and then
// follow new points as server-sent events (/api/events).
//
// # Who may use it
//
// The dashboard acts with its process's privileges (as root: every
// process's command line and stacks, tracepoints on any process), so
// Server.Handler admits a request only when four checks pass, in this
// order:
//
//   - Host: a loopback name (DNS rebinding gets nothing), unless
//     Config.AnyHost;
//   - peer: the connecting socket's owner, from the kernel's socket table
//     (proc.FS.TCPSocketOwner), is the dashboard's user, root or one of
//     Config.AllowUIDs (403 otherwise, token or not);
//   - token: the per-start secret (Server.Token), in the cookie the first
//     page load sets from ?token=, a bearer header or the query (401);
//   - origin: every request but a page load comes from the page's own
//     origin (Sec-Fetch-Site, Origin; 403).
//
// Reading is GET; the two actions, exact syscall counting and a profile,
// are POST. guard.go says why each check is there.
package web
