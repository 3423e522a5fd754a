package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// capsNote is missingCapsNote for this process: its effective capability
// set (capget(2)) and whether tracefs is mounted where gosleuth looks.
func capsNote(command string) string {
	has := effectiveCaps()
	if has == nil {
		return ""
	}
	mounted := false
	for _, p := range []string{"/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"} {
		if _, err := os.Stat(p); err == nil {
			mounted = true
		}
	}
	return missingCapsNote(command, os.Geteuid(), has, mounted)
}

// rootDeniedNote is topDeniedNote for this process.
func rootDeniedNote() string {
	has := effectiveCaps()
	if has == nil {
		return ""
	}
	return topDeniedNote(os.Geteuid(), has)
}

// effectiveCaps says whether this process's effective capability set
// (capget(2)) holds a capability; nil when it cannot be read.
func effectiveCaps() func(int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	return func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
}
