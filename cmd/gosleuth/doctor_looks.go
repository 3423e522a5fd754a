package main

import "github.com/gosleuth/gosleuth/internal/doctor"

// doctorLooks returns the close-look sources the doctor uses: syscall
// counts, stack samples and runtime metrics (agent, or the URLs given). Each
// says for itself when it cannot run here.
func doctorLooks(procRoot, pprofURL, metricsURL string) []doctor.Look {
	return []doctor.Look{
		doctor.SyscallsLook{ProcRoot: procRoot},
		doctor.StacksLook{ProcRoot: procRoot},
		doctor.RuntimeLook{PprofURL: pprofURL, MetricsURL: metricsURL, ProcRoot: procRoot},
	}
}
