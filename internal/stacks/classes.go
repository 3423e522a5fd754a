package stacks

import "strings"

// Class is the runtime class of a sample: what the Go program was doing,
// as far as the stack tells.
type Class string

// The runtime classes. Syscalls are further split by kernel entry point:
// "syscall read", "syscall futex", ...
const (
	ClassUser       Class = "user code"
	ClassGCMark     Class = "gc background marking"
	ClassGCAssist   Class = "gc mark assist"
	ClassGCOther    Class = "gc sweep and scavenge"
	ClassScheduler  Class = "scheduler"
	ClassIdle       Class = "idle runtime threads"
	ClassNetpoll    Class = "netpoll"
	ClassSysmon     Class = "sysmon"
	ClassCgo        Class = "cgo"
	ClassPageFault  Class = "kernel page faults"
	ClassInterrupt  Class = "kernel interrupts"
	ClassKernel     Class = "kernel other"
	ClassNotSampled Class = "kernel time, not sampled"
	// ClassSyscallPrefix starts the classes of samples in a system call.
	ClassSyscallPrefix = "syscall "
)

// runtimeClasses maps Go runtime functions to the class a stack containing
// them belongs to, checked in this order (the first match wins), because
// for example netpoll runs inside findRunnable.
var runtimeClasses = []struct {
	class Class
	funcs []string
}{
	{ClassSysmon, []string{"runtime.sysmon"}},
	{ClassGCAssist, []string{"runtime.gcAssistAlloc", "runtime.gcAssistAlloc1", "runtime.gcAssistAlloc.func1"}},
	{ClassGCMark, []string{"runtime.gcBgMarkWorker", "runtime.gcBgMarkWorker.func2", "runtime.gcMarkDone", "runtime.gcMarkTermination"}},
	{ClassNetpoll, []string{"runtime.netpoll", "runtime.netpollBreak"}},
	{ClassIdle, []string{"runtime.stopm", "runtime.templateThread", "runtime.mPark", "runtime.notesleep", "runtime.stoplockedm", "runtime.stopTheWorldWithSema"}},
	{ClassScheduler, []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.goschedImpl",
		"runtime.gosched_m", "runtime.goexit0", "runtime.wakep", "runtime.startm", "runtime.handoffp",
		"runtime.exitsyscall0", "runtime.injectglist", "runtime.stealWork", "runtime.resetspinning",
		"runtime.goready", "runtime.ready", "runtime.newproc", "runtime.mstart1", "runtime.preemptPark", "runtime.gopreempt_m"}},
	{ClassGCOther, []string{"runtime.bgsweep", "runtime.bgscavenge", "runtime.gcStart", "runtime.forEachP", "runtime.gcResetMarkState", "runtime.GC"}},
	{ClassCgo, []string{"runtime.cgocall", "runtime.asmcgocall", "runtime.cgocallbackg", "runtime.cgocallback"}},
}

var classOf = func() map[string]Class {
	m := map[string]Class{}
	for _, rc := range runtimeClasses {
		for _, f := range rc.funcs {
			m[f] = rc.class
		}
	}
	return m
}()

var classRank = func() map[Class]int {
	m := map[Class]int{}
	for i, rc := range runtimeClasses {
		m[rc.class] = i
	}
	return m
}()

// syscallPrefixes begin the names of a system call's kernel functions: its
// entry (__x64_sys_read) and, for a call defined with SYSCALL_DEFINE, its
// body (__do_sys_gettid), which shares the entry's address when the entry
// is only a jump to it. At a shared address the kernel's own lookup names
// the first alias and /proc/kallsyms lists both.
var syscallPrefixes = []string{"__x64_sys_", "__arm64_sys_", "__do_sys_", "__se_sys_"}

// syscallFunc returns the system call a kernel function belongs to, or "".
func syscallFunc(fn string) string {
	for _, p := range syscallPrefixes {
		if name, ok := strings.CutPrefix(fn, p); ok && name != "" {
			return name
		}
	}
	return ""
}

// classify returns the class of a stack given leaf first.
func classify(frames []SymFrame, mode Mode) Class {
	best, rank := Class(""), len(runtimeClasses)
	var syscall string
	var fault, irq, entry bool
	for _, f := range frames {
		if f.Kernel {
			switch {
			case f.Func == KernelTimeNotSampled:
				return ClassNotSampled
			case syscall == "" && syscallFunc(f.Func) != "":
				syscall = syscallFunc(f.Func)
			case strings.HasPrefix(f.Func, "entry_SYSCALL") || f.Func == "do_syscall_64":
				entry = true
			case strings.Contains(f.Func, "page_fault"):
				fault = true
			case strings.HasPrefix(f.Func, "asm_sysvec_") || strings.HasPrefix(f.Func, "asm_common_interrupt") ||
				strings.HasPrefix(f.Func, "irq_exit") || strings.HasPrefix(f.Func, "__irq_exit"):
				irq = true
			}
			continue
		}
		if c, ok := classOf[f.Func]; ok && classRank[c] < rank {
			best, rank = c, classRank[c]
		}
		if strings.HasPrefix(f.Func, "_cgo_") && rank > classRank[ClassCgo] {
			best, rank = ClassCgo, classRank[ClassCgo]
		}
	}
	if best != "" && best != ClassCgo {
		return best
	}
	if mode == ModeKernel {
		switch {
		case syscall != "":
			return Class(ClassSyscallPrefix + syscall)
		case entry:
			// Sampled in the entry or exit path: name the call from the
			// Go wrapper that made it.
			return Class(ClassSyscallPrefix + syscallFromUser(frames))
		case fault:
			return ClassPageFault
		case irq:
			return ClassInterrupt
		}
		if best == "" {
			return ClassKernel
		}
	}
	if best != "" {
		return best
	}
	return ClassUser
}

// genericSyscall are the Go functions that make any system call; the
// wrapper above them names the call.
var genericSyscall = map[string]bool{
	"Syscall": true, "Syscall6": true, "RawSyscall": true, "RawSyscall6": true,
	"rawSyscallNoError": true, "rawVforkSyscall": true, "runtime_doAllThreadsSyscall": true,
	"AllThreadsSyscall": true, "syscall": true, "Syscall9": true, "rawsyscall": true, "vsyscall": true,
}

// syscallFromUser names a system call from the first user frame in a
// syscall-making package that is not a generic stub: syscall.Getppid ->
// getppid, runtime.futex -> futex, syscall.read -> read.
func syscallFromUser(frames []SymFrame) string {
	for _, f := range frames {
		if f.Kernel {
			continue
		}
		name := f.Func
		pkg := ""
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			pkg, name = name[:i+1], name[i+1:]
		}
		dot := strings.IndexByte(name, '.')
		if dot < 0 {
			return "unknown"
		}
		pkg += name[:dot]
		name = name[dot+1:]
		switch pkg {
		case "syscall", "golang.org/x/sys/unix", "internal/runtime/syscall/linux", "internal/runtime/syscall", "runtime", "internal/syscall/unix":
		default:
			return "unknown"
		}
		if genericSyscall[name] || strings.ContainsAny(name, ".(") {
			continue
		}
		return strings.ToLower(name)
	}
	return "unknown"
}
