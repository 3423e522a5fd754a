// Package syscalls counts the system calls of a process from outside it,
// the way "perf stat -e 'syscalls:sys_enter_*'" or "strace -c" do, and
// formats the result like strace -c.
//
// # Mechanisms
//
// [Counter] opens one counting perf event per syscall tracepoint and thread
// (pid=TID, cpu=-1), grouped per thread so one read returns them all, and
// inherited, so threads and child processes started later are counted by
// the kernel too. The counts are the kernel's: exact. Per-task events fire
// only for their task, so other processes are not taxed (unlike a BPF
// program on a syscall tracepoint, which runs for every task). It needs
// root (tracefs ids, perf_event_paranoid) and one descriptor per syscall
// and thread present at attach; RLIMIT_NOFILE is raised to its hard limit.
//
// [CountExact] is what the views use: it counts a process's syscalls by
// name ([CountedNames] unless told otherwise) with one of the two exact
// mechanisms, chosen when it attaches ([Mechanism]): per-task tracepoint
// counters, or one BPF program on raw_syscalls:sys_enter ([BPFCounter])
// when asked or when the target has too many threads for a descriptor per
// syscall and thread. Each set of BPF objects (maps, program, link) has one
// owner that releases it with one Close.
//
// Without root the approximate /proc mode ([ProcSampler]) reads the
// read- and write-class syscall counters of /proc/PID/io and samples
// /proc/PID/task/*/syscall to show in which syscalls the threads wait.
//
// # Releasing
//
// Every descriptor is close-on-exec and belongs to the Counter. Releasing
// the last event of a tracepoint waits for an RCU grace period in the
// kernel, serialised under a kernel mutex: closing all ~360 syscall
// tracepoints takes about 10 s on a 2-vCPU VM (perf stat pays the same).
// So from attach on a releaser process holds a second reference to every
// event: when gosleuth ends, however it ends (even SIGKILL), the releaser
// disables the events at once, so the target stops being counted, and
// then pays the kernel's release time; [Counter.Detach] lets gosleuth
// exit in milliseconds.
//
// # Names
//
// Syscall numbers are named from tables for amd64 and arm64 generated from
// golang.org/x/sys/unix (go generate runs mknames.go); unknown numbers print
// as sys_NNN.
package syscalls
