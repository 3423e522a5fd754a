package main

import "strings"

// capNeed is a capability some of gosleuth's sources need as root, and
// what a command loses without it. A container that runs gosleuth as root
// but drops capabilities gets the fallbacks quietly otherwise: the sources'
// own notes say "needs root", which it is.
type capNeed struct {
	name string
	// or is a capability that grants this one's powers too (CAP_SYS_ADMIN
	// covers CAP_PERFMON and CAP_BPF), 0 for none.
	bit, or  int
	lost     string
	commands []string
}

// Linux capability numbers (linux/capability.h).
const (
	capDACReadSearch = 2
	capSysPtrace     = 19
	capSysAdmin      = 21
	capPerfmon       = 38
	capBPF           = 39
)

// capNeeds lists, per capability, the commands whose sources use it; the
// table in docs/containers.md says the same, as tested in a container.
var capNeeds = []capNeed{
	{"CAP_SYS_PTRACE", capSysPtrace, 0, "Go versions, the runtime source and probes of processes it did not start",
		[]string{"top", "doctor", "exporter", "web", "inspect", "probe"}},
	{"CAP_DAC_READ_SEARCH", capDACReadSearch, 0, "other users' descriptor counts and I/O",
		[]string{"top", "exporter", "web"}},
	{"CAP_PERFMON", capPerfmon, capSysAdmin, "kernel stacks, exact syscall counts and probes",
		[]string{"doctor", "profile", "syscalls", "probe", "web", "exporter", "compare"}},
	{"CAP_BPF", capBPF, capSysAdmin, "BPF syscall counting, probes and the exporter's task iterator",
		[]string{"doctor", "probe", "exporter", "compare"}},
}

// tracefsCommands count syscalls through tracepoints found in tracefs.
var tracefsCommands = []string{"doctor", "syscalls", "web", "exporter", "compare", "probe"}

// missingCapsNote is the one-line note for command when gosleuth runs as
// root (euid 0) without some capability its sources use, or when tracefs
// is not mounted and cannot be (no CAP_SYS_ADMIN); "" otherwise. has says
// whether the effective set holds a capability.
func missingCapsNote(command string, euid int, has func(int) bool, tracefsMounted bool) string {
	if euid != 0 {
		return ""
	}
	var missing []string
	for _, n := range capNeeds {
		if !has(n.bit) && (n.or == 0 || !has(n.or)) && contains(n.commands, command) {
			missing = append(missing, n.name+" ("+n.lost+")")
		}
	}
	if !tracefsMounted && !has(capSysAdmin) && contains(tracefsCommands, command) {
		missing = append(missing, "CAP_SYS_ADMIN or the host's /sys/kernel/tracing mounted in (tracefs is not mounted: exact syscall counts)")
	}
	if len(missing) == 0 {
		return ""
	}
	return "running as root without " + strings.Join(missing, ", ") + ": those sources fall back (docs/containers.md)"
}

// topDeniedNote is top's note on cells it could not read when gosleuth
// runs as root (euid 0): telling root to run as root helps no one, so it
// names the capabilities top uses that this process lacks, or else says
// the processes are beyond root's reach here. "" when not root: top's
// own note (run as root) is then right.
func topDeniedNote(euid int, has func(int) bool) string {
	if euid != 0 {
		return ""
	}
	var missing []string
	for _, n := range capNeeds {
		if contains(n.commands, "top") && !has(n.bit) && (n.or == 0 || !has(n.or)) {
			missing = append(missing, n.name)
		}
	}
	why := "even as root with every capability top uses: those processes are outside gosleuth's user namespace, or the kernel's own"
	if len(missing) > 0 {
		why = "gosleuth runs as root without " + strings.Join(missing, " and ") + " (docs/containers.md)"
	}
	return "some cells show '-': no permission to read them (fds, io, executable): " + why
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
