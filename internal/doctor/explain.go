package doctor

import "slices"

// explains lists, cause by cause in the order they claim symptoms, the
// findings each cause explains when both are found in one process. A
// symptom is claimed by the first cause that explains it. An info-level
// cause claims only info-level symptoms (a guess does not swallow a
// warning); a cause at warn or above claims any, and takes the severity
// of the worst (a leak whose descriptors reach the limit in minutes is
// critical).
//
// The pairs are Go runtime mechanics, not correlations:
//   - a contended sync.Mutex parks and wakes goroutines through futex: the
//     wake-ups, the kernel time and the scheduler's share are the lock's
//     handoffs, so they are not a timer loop (the contradiction issue 14
//     names: a lock-bound program told to slow its ticker); a hot call
//     made by the function that takes the lock is the work held under it;
//   - leaked goroutines hold their stacks (RSS grows), and the descriptors
//     they were using (a connection per stuck request), and each one
//     started wakes an M to run it;
//   - re-opened files and exec'd children are kernel time, and the polling
//     loop that re-opens or re-runs them sleeps between rounds: its
//     wake-ups are the scheduler's work;
//   - GC work and mark assist are one allocation problem, and a lock
//     holder drafted into assist (or stopped for the GC) makes the lock's
//     waiters queue: with GC at a quarter of the CPU, lock waits are its
//     symptom first;
//   - threads blocked in syscalls, and Ps beyond the CPUs, make the
//     scheduler and the kernel park and wake threads;
//   - a timer loop is the scheduler's and the kernel's work at each tick.
var explains = []struct {
	cause    string
	symptoms []string
}{
	// Goroutines started per small task are the scheduler's work, its
	// thread wake-ups and their kernel time (the churn patient: 54% of
	// its samples in the scheduler, under its go statement).
	{"goroutine-churn", []string{"scheduler-overhead", "idle-wakeups", "kernel-time"}},
	// A new connection per request is kernel time (socket, connect,
	// setsockopt, close), and a hot call that dials is its code.
	{"connection-churn", []string{"kernel-time", "cpu-hotspot", "idle-wakeups", "scheduler-overhead"}},
	// Millions of pointer-rich objects from one site are what every GC
	// cycle marks: the GC's share, its assists and the scheduler work of
	// its cycles are theirs, and a cache that grows is the heap growing.
	// As with gc-pressure below, a lock holder drafted into assist makes
	// the lock's waiters queue.
	{"heap-holders", []string{"gc-pressure", "gc-assist", "lock-contention", "scheduler-overhead", "memory-growth"}},
	// Parked goroutines holding buffers are the resident memory.
	{"goroutine-memory", []string{"memory-growth"}},
	// A herd woken together (a channel closed to thousands of goroutines)
	// queues on whatever mutex the woken goroutines take: when the
	// program's code waking goroutines outside any lock holds at least
	// the lock's share of samples, the herd is the cause and the lock
	// waits its symptom (the herd patient: 30% under close(old), 2.6% in
	// the lock).
	{"scheduler-overhead", []string{"lock-contention"}},
	// A hot call that opens files is the churn's code, not a second cause.
	{"file-reopen-churn", []string{"cpu-hotspot"}},
	{"gc-pressure", []string{"gc-assist", "lock-contention", "scheduler-overhead"}},
	{"lock-contention", []string{"idle-wakeups", "scheduler-overhead", "kernel-time", "cpu-hotspot"}},
	{"goroutine-leak", []string{"memory-growth", "fd-leak", "idle-wakeups", "scheduler-overhead"}},
	{"file-reopen-churn", []string{"kernel-time", "scheduler-overhead"}},
	// Starting and reaping a child wakes the parent many times (fork's
	// pipe, the copying goroutines, the wait on the child's pidfd): the
	// exec patient wakes 18 times per child, 849 wake-ups a second at 47
	// children a second, which idle-wakeups reported on its own once the
	// adaptive stack rate gave it enough samples to name the code.
	// A hot call that starts programs (an unseen patient's
	// exec.Command(...).Output() per health check) is the exec path's code.
	{"exec-hot-path", []string{"kernel-time", "scheduler-overhead", "idle-wakeups", "cpu-hotspot"}},
	{"thread-explosion", []string{"kernel-time", "scheduler-overhead"}},
	{"idle-wakeups", []string{"scheduler-overhead", "kernel-time"}},
	{"gomaxprocs-oversized", []string{"scheduler-overhead", "kernel-time"}},
	{"scheduler-overhead", []string{"kernel-time"}},
}

// explain attaches findings to the causes that explain them and returns
// what is left to report on its own: causes with their symptoms, and
// symptoms no cause explained.
func explain(found []Finding) []Finding {
	idx := map[string]int{}
	for i, f := range found {
		idx[f.ID] = i
	}
	claimed := make([]bool, len(found))
	for _, e := range explains {
		ci, ok := idx[e.cause]
		if !ok || claimed[ci] {
			continue
		}
		c := &found[ci]
		for _, s := range e.symptoms {
			si, ok := idx[s]
			if !ok || claimed[si] || c.Severity < Warn && found[si].Severity > c.Severity || !explainsIt(*c, found[si]) {
				continue
			}
			claimed[si] = true
			sf := found[si]
			obs := sf.Observed
			if obs == "" {
				obs = sf.Title
			}
			c.Symptoms = append(c.Symptoms, Symptom{ID: sf.ID, Severity: sf.Severity, Observed: obs, Evidence: sf.Evidence})
			// The symptom's own symptoms come along, and its code when the
			// cause has none (gc-assist's allocation sites for gc-pressure).
			c.Symptoms = append(c.Symptoms, sf.Symptoms...)
			if len(c.Code) == 0 {
				c.Code = sf.Code
			}
			c.Sources = mergeSources(c.Sources, sf.Sources)
			c.Cores = max(c.Cores, sf.Cores)
			c.Severity = max(c.Severity, sf.Severity)
		}
	}
	out := found[:0:0]
	for i, f := range found {
		if !claimed[i] {
			out = append(out, f)
		}
	}
	return out
}

// explainsIt reports whether a cause explains a finding the table pairs it
// with, for the pairs that hold only in some cases.
func explainsIt(cause, f Finding) bool {
	if cause.ID == "scheduler-overhead" && f.ID == "lock-contention" {
		// The herd's scheduler work is under the program's code (closing
		// a channel, waking goroutines) outside any lock's slow path; a
		// lock-bound program's scheduler samples are parked threads
		// (no program frames) and the lock's own handoffs.
		lock, ok := evidenceNum(f, "lock_share_pct")
		herd := 0.0
		for _, c := range cause.Code {
			herd += c.Share
		}
		return ok && herd > 0 && 100*herd >= lock
	}
	if f.ID != "cpu-hotspot" {
		return true
	}
	switch cause.ID {
	case "connection-churn":
		// Only a hot call that dials is the churn's code.
		return slices.Contains(dialCalls, evidenceString(f, "call"))
	case "exec-hot-path":
		// Only a hot call that starts a program is the exec path.
		return slices.Contains(execCalls, evidenceString(f, "call"))
	case "file-reopen-churn":
		// Only a hot call that opens files is reopen churn.
		return opensFiles(evidenceString(f, "call"))
	case "lock-contention":
		// A hot call made by the function that takes the contended lock
		// is the slow work held under it.
		for _, c := range f.Code {
			if slices.ContainsFunc(cause.Code, func(l CodeRef) bool { return l.Func == c.Func }) {
				return true
			}
		}
	}
	return false
}

// execCalls are the library calls that start a program.
var execCalls = []string{
	"os/exec.(*Cmd).Run", "os/exec.(*Cmd).Start", "os/exec.(*Cmd).Output", "os/exec.(*Cmd).CombinedOutput",
	"os.StartProcess", "syscall.ForkExec", "syscall.StartProcess",
}

// evidenceString returns a string in a finding's evidence, "" if absent.
func evidenceString(f Finding, name string) string {
	for _, e := range f.Evidence {
		if e.Name == name {
			s, _ := e.Value.(string)
			return s
		}
	}
	return ""
}

// evidenceNum returns a number in a finding's evidence.
func evidenceNum(f Finding, name string) (float64, bool) {
	for _, e := range f.Evidence {
		if e.Name == name {
			v, ok := e.Value.(float64)
			return v, ok
		}
	}
	return 0, false
}

func mergeSources(a, b []Source) []Source {
	out := append([]Source{}, a...)
	for _, s := range b {
		dup := false
		for _, x := range out {
			dup = dup || x == s
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}
