package syscalls

import (
	"runtime"
	"strconv"
)

//go:generate go run mknames.go

// Arch names a syscall table: "amd64" or "arm64".
type Arch string

// The architectures with a generated table.
const (
	AMD64 Arch = "amd64"
	ARM64 Arch = "arm64"
)

// HostArch is the table for the running binary's architecture (empty when
// there is none: names then print as sys_NNN).
var HostArch = Arch(runtime.GOARCH)

func table(a Arch) []string {
	switch a {
	case AMD64:
		return namesAMD64[:]
	case ARM64:
		return namesARM64[:]
	}
	return nil
}

// Name returns the name of syscall nr on arch a, or "sys_NNN" when the
// table has none.
func Name(a Arch, nr int) string {
	if t := table(a); nr >= 0 && nr < len(t) && t[nr] != "" {
		return t[nr]
	}
	return "sys_" + strconv.Itoa(nr)
}

// tracepointAliases maps the names the kernel gives some syscall
// tracepoints (from the SYSCALL_DEFINE name) to the table's names.
var tracepointAliases = map[string]string{
	"newfstat":   "fstat",
	"newlstat":   "lstat",
	"newstat":    "stat",
	"newuname":   "uname",
	"sendfile64": "sendfile",
	"umount":     "umount2",
}

// Number returns the number of the syscall called name on arch a, also
// accepting the kernel's tracepoint spelling (newfstat for fstat, ...), and
// false when the table does not know it.
func Number(a Arch, name string) (int, bool) {
	t := table(a)
	for _, n := range []string{name, tracepointAliases[name]} {
		if n == "" {
			continue
		}
		for nr, s := range t {
			if s == n {
				return nr, true
			}
		}
	}
	return -1, false
}
