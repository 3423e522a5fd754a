package stacks

import (
	"testing"
	"time"
)

// fakeProfile is a small symbolized profile: two threads, Go and kernel
// frames.
func fakeProfile() *Profile {
	raw := &Raw{PID: 42, Exe: "/bin/x", Hz: 99, Period: time.Second / 99,
		Start: time.Unix(0, 0), End: time.Unix(2, 0), Threads: map[int]string{1: "x", 2: "x"}, Samples: 6}
	p := &Profile{Raw: raw}
	add := func(tid int, mode Mode, n int64, frames ...SymFrame) {
		p.Stacks = append(p.Stacks, SymStack{Stack: &Stack{TID: tid, Mode: mode, Count: n}, Frames: frames, Class: classify(frames, mode)})
	}
	g := func(name string) SymFrame { return SymFrame{Frame: Frame{Func: name, File: "x.go", Line: 1}, Map: 0} }
	k := func(name string) SymFrame { return SymFrame{Frame: Frame{Func: name}, Kernel: true, Map: 1} }
	add(1, ModeUser, 3, g("main.work"), g("main.main"), g("runtime.main"))
	add(2, ModeKernel, 2, k("__task_pid_nr_ns"), k("__x64_sys_getppid"), k("do_syscall_64"), g("syscall.rawSyscallNoError"), g("syscall.Getppid"), g("main.main"))
	add(2, ModeUser, 1, g("runtime.gcDrain"), g("runtime.gcBgMarkWorker"))
	return p
}

func TestClassify(t *testing.T) {
	p := fakeProfile()
	want := []Class{ClassUser, "syscall getppid", ClassGCMark}
	for i, st := range p.Stacks {
		if st.Class != want[i] {
			t.Errorf("stack %d: class %q, want %q", i, st.Class, want[i])
		}
	}
	s := p.Summarize(3)
	if s.KernelShare < 0.33 || s.KernelShare > 0.34 || s.Top[0].Function != "main.work" {
		t.Errorf("kernel share %.3f, top %v", s.KernelShare, s.Top)
	}
}
