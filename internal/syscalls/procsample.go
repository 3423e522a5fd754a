package syscalls

import (
	"bytes"
	"cmp"
	"os"
	"slices"
	"strconv"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// ProcSampler samples /proc/PID/task/*/syscall to find in which syscalls
// a process's threads wait: the approximate mode, which needs no privilege
// beyond ptrace access to the target (same user). Each thread's file is
// opened once and re-read from offset 0.
type ProcSampler struct {
	fs      proc.FS
	pid     int
	arch    Arch
	tasks   map[int]*os.File
	buf     []byte
	blocked map[int]int
	running int
	user    int
	// Samples is the number of thread samples taken.
	Samples int
}

// NewProcSampler returns a sampler for pid under the proc mount root ("" is
// /proc), naming syscalls with the table for a.
func NewProcSampler(root string, pid int, a Arch) *ProcSampler {
	return &ProcSampler{fs: proc.NewFS(root), pid: pid, arch: a, tasks: map[int]*os.File{},
		buf: make([]byte, 256), blocked: map[int]int{}}
}

// Rescan opens the syscall files of threads that appeared and closes those
// of threads that have gone.
func (s *ProcSampler) Rescan() {
	tids, err := s.fs.TaskIDs(s.pid)
	if err != nil {
		return
	}
	seen := map[int]bool{}
	for _, tid := range tids {
		seen[tid] = true
		if _, ok := s.tasks[tid]; ok {
			continue
		}
		f, err := s.fs.Open(s.pid, "task", strconv.Itoa(tid), "syscall")
		if err != nil {
			continue
		}
		s.tasks[tid] = f
	}
	for tid, f := range s.tasks {
		if !seen[tid] {
			f.Close()
			delete(s.tasks, tid)
		}
	}
}

// Threads returns how many threads are being sampled.
func (s *ProcSampler) Threads() int { return len(s.tasks) }

// Sample reads every thread's state once.
func (s *ProcSampler) Sample() {
	for tid, f := range s.tasks {
		n, err := f.ReadAt(s.buf, 0)
		if n == 0 && err != nil {
			f.Close()
			delete(s.tasks, tid)
			continue
		}
		s.add(s.buf[:n])
	}
}

// add counts one thread's /proc/PID/task/TID/syscall content: "running",
// "-1 sp pc" (stopped outside a syscall) or "nr args... sp pc".
func (s *ProcSampler) add(b []byte) {
	b = bytes.TrimSpace(b)
	s.Samples++
	if bytes.Equal(b, []byte("running")) {
		s.running++
		return
	}
	field, _, _ := bytes.Cut(b, []byte(" "))
	nr, err := strconv.Atoi(string(field))
	if err != nil || nr < 0 {
		s.user++
		return
	}
	s.blocked[nr]++
}

// Fill sets the sampling fields of a, sorted by samples.
func (s *ProcSampler) Fill(a *Approx) {
	a.Samples = s.Samples
	a.Blocked = a.Blocked[:0]
	for nr, n := range s.blocked {
		a.Blocked = append(a.Blocked, BlockedRow{Name: Name(s.arch, nr), Nr: nr, Samples: n, Percent: s.percent(n)})
	}
	slices.SortFunc(a.Blocked, func(x, y BlockedRow) int {
		return cmp.Or(cmp.Compare(y.Samples, x.Samples), cmp.Compare(x.Name, y.Name))
	})
	a.Running = s.percent(s.running)
	a.User = s.percent(s.user)
}

func (s *ProcSampler) percent(n int) float64 {
	if s.Samples == 0 {
		return 0
	}
	return 100 * float64(n) / float64(s.Samples)
}

// Close closes every file.
func (s *ProcSampler) Close() {
	for tid, f := range s.tasks {
		f.Close()
		delete(s.tasks, tid)
	}
}
