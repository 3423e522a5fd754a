package main

import "github.com/gosleuth/gosleuth/internal/window"

// doctorLooks returns the close-look sources the doctor uses: syscall
// counts, stack samples, runtime metrics (agent, or the URLs given), probes
// and descriptor listings. Each
// says for itself when it cannot run here.
func doctorLooks(procRoot, pprofURL, metricsURL string) []window.Look {
	return []window.Look{
		window.SyscallsLook{ProcRoot: procRoot},
		window.StacksLook{ProcRoot: procRoot},
		window.RuntimeLook{PprofURL: pprofURL, MetricsURL: metricsURL, ProcRoot: procRoot},
		window.ProbesLook{ProcRoot: procRoot},
		window.FilesLook{ProcRoot: procRoot},
	}
}
