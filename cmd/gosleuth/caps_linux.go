package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// capsNote is missingCapsNote for this process: its effective capability
// set (capget(2)) and whether tracefs is mounted where gosleuth looks.
func capsNote(command string) string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return ""
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	mounted := false
	for _, p := range []string{"/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"} {
		if _, err := os.Stat(p); err == nil {
			mounted = true
		}
	}
	return missingCapsNote(command, os.Geteuid(), has, mounted)
}
