package window

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// Runtime classes of stack samples, as Stacks.Classes names them: the
// stack source's classes (stacks.Class) folded into what the rules ask
// about.
const (
	ClassGCBackground = "gc-background" // runtime.gcBgMarkWorker and sweeping
	ClassGCAssist     = "gc-assist"     // runtime.gcAssistAlloc on a goroutine's stack
	ClassScheduler    = "scheduler"     // schedule, findRunnable, stopm, park_m, mcall
	ClassLock         = "lock"          // sync.(*Mutex).lockSlow, runtime.lock2, semacquire
	ClassUserCode     = "user"          // the program's own code, outside the runtime and kernel
)

// Stack sampling rates: SampleHz aims at SampleBudget samples per second
// of wall time, between MinSampleHz and MaxSampleHz per thread.
const (
	// MinSampleHz is perf's customary 99 Hz, kept for busy processes:
	// they give enough samples at it.
	MinSampleHz = 99
	// MaxSampleHz bounds the rate for nearly idle processes: each sample
	// is an interrupt and a stack walk of a few microseconds, so 999 per
	// CPU second cost a target under 1% of the little CPU it uses, and
	// nothing while it does not run.
	MaxSampleHz = 999
	// SampleBudget is the samples per second of wall time SampleHz aims
	// at: ~200 make a 3 s look hold ~600 samples, enough for a 30% share
	// to be told apart from 15% (the rules' thresholds) whatever the
	// process's speed.
	SampleBudget = 200
)

// SampleHz is the stack sampling rate for a process that uses cores CPUs
// on average: SampleBudget/cores clamped to [MinSampleHz, MaxSampleHz].
// Sampling is per CPU second, so at a fixed 99 Hz a process using 5% of a
// core gives 5 samples a second, too few to name its hot code in a short
// look; a busy one needs no more than 99 Hz.
func SampleHz(cores float64) int {
	if !(cores > 0) { // also NaN
		return MaxSampleHz
	}
	hz := SampleBudget / cores
	return int(min(max(hz, MinSampleHz), MaxSampleHz))
}

// StacksLook samples user and kernel stacks (user-only without privileges)
// and summarises them into runtime classes, hot packages, kernel paths and
// the Go callers behind them.
type StacksLook struct {
	// ProcRoot is the procfs mount the target is read through ("" is /proc).
	ProcRoot string
	// Hz is the sampling rate per thread; 0 chooses it from the process's
	// average CPU use with SampleHz.
	Hz int
}

// Source implements Look.
func (StacksLook) Source() Source { return SourceStacks }

// Look implements Look.
func (l StacksLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	hz := l.Hz
	if hz <= 0 {
		cores, err := proc.NewFS(l.ProcRoot).AverageCores(pid)
		if err != nil {
			return fmt.Errorf("choose stack sampling rate: %w", err)
		}
		hz = SampleHz(cores)
	}
	raw, err := stacks.Sample(ctx, stacks.Options{PID: pid, Duration: d, ProcRoot: l.ProcRoot, Hz: hz})
	if err != nil {
		return fmt.Errorf("sample stacks: %w", err)
	}
	p := stacks.Symbolize(raw)
	w.Stacks = summarizeStacks(p)
	if w.Stacks.Samples == 0 {
		w.Stacks = nil // the process did not run: nothing to conclude from
	}
	return nil
}

// utilityPkgs are packages whose time belongs to whoever called them when
// deciding which package is hot.
func utilityPkg(pkg string) bool {
	switch pkg {
	case "runtime", "reflect", "strconv", "sync", "sync/atomic", "syscall", "math", "sort", "slices", "maps",
		"strings", "bytes", "unicode", "unicode/utf8", "unicode/utf16", "time", "os", "io", "bufio", "errors", "fmt":
		return true
	}
	return strings.HasPrefix(pkg, "internal/") || strings.HasPrefix(pkg, "runtime/") || strings.HasPrefix(pkg, "vendor/")
}

// funcPkg returns the package path of a Go function name
// ("encoding/json.(*decodeState).object" -> "encoding/json").
func funcPkg(fn string) string {
	if i := strings.IndexByte(fn, '['); i >= 0 {
		fn = fn[:i] // type arguments of a generic function may hold dots and slashes
	}
	slash := strings.LastIndexByte(fn, '/')
	dot := strings.IndexByte(fn[slash+1:], '.')
	if dot < 0 {
		return ""
	}
	return fn[:slash+1+dot]
}

// isLockFrame reports whether fn is in the slow path of a Go lock: the
// mutex's lock/unlock slow paths and the semaphores under them (Go 1.24+
// keeps them in internal/sync), or the runtime's own locks.
func isLockFrame(fn string) bool {
	// runtime.lock2 is left out: channels, timers and the scheduler take
	// runtime locks all the time, contended or not.
	switch fn {
	case "runtime.semacquire1", "runtime.semrelease1":
		return true
	}
	return strings.HasSuffix(fn, ".lockSlow") || strings.HasSuffix(fn, ".unlockSlow") || strings.HasSuffix(fn, ".rUnlockSlow") ||
		strings.Contains(fn, ".runtime_Semacquire") || strings.Contains(fn, ".runtime_Semrelease")
}

// waitGroupStack reports a stack in sync.WaitGroup's Wait or Done: they
// park and wake on the same semaphores as a mutex's slow path, but waiting
// for others' work to finish is not contention for a lock.
func waitGroupStack(frames []stacks.SymFrame) bool {
	return slices.ContainsFunc(frames, func(f stacks.SymFrame) bool {
		return !f.Kernel && (strings.Contains(f.Func, "runtime_SemacquireWaitGroup") || strings.HasPrefix(f.Func, "sync.(*WaitGroup)."))
	})
}

// firstCaller returns the first user frame, leaf first, that is not in
// runtime or utility code, "" if none.
func firstCaller(frames []stacks.SymFrame) string {
	for _, f := range frames {
		if f.Kernel || f.Unknown {
			continue
		}
		if pkg := funcPkg(f.Func); pkg != "" && !utilityPkg(pkg) {
			return f.Func
		}
	}
	return ""
}

// StdlibFunc reports whether a Go function is in the standard library or
// the runtime ("net/http.(*conn).serve" yes, "main.handle" and
// "example.com/x.F" no).
func StdlibFunc(fn string) bool {
	pkg := funcPkg(fn)
	return pkg != "" && stdlibPkg(pkg)
}

// stdlibPkg reports whether a package path is the standard library's (its
// first element has no dot), main excepted.
func stdlibPkg(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return pkg != "main" && !strings.Contains(first, ".")
}

// ownFrame reports whether f is the program's own code: a Go frame outside
// the standard library (package main, or another module's package; which
// module is the program's own is not known here, so libraries from other
// modules count as own code too).
func ownFrame(f stacks.SymFrame) bool {
	if f.Kernel || f.Unknown {
		return false
	}
	pkg := funcPkg(f.Func)
	return pkg != "" && !stdlibPkg(pkg)
}

// siteFrame returns the frame that names the code responsible for a stack:
// the program's own frame nearest the leaf, else the first caller outside
// the runtime and utility packages.
func siteFrame(frames []stacks.SymFrame) (stacks.SymFrame, bool) {
	for _, f := range frames {
		if ownFrame(f) {
			return f, true
		}
	}
	for _, f := range frames {
		if f.Kernel || f.Unknown {
			continue
		}
		if pkg := funcPkg(f.Func); pkg != "" && !utilityPkg(pkg) {
			return f, true
		}
	}
	return stacks.SymFrame{}, false
}

// isTimerFrame reports whether fn waits on or fires a timer: time.Sleep,
// tickers and timers, and the runtime's timer code.
func isTimerFrame(fn string) bool {
	// Timers and sleeps, not clock reads: a loop's work that calls
	// time.Now was once named as the loop "waiting on a timer".
	for _, p := range []string{"time.Sleep", "time.(*Timer)", "time.(*Ticker)", "time.NewTimer", "time.NewTicker", "time.AfterFunc", "time.After", "time.Tick", "time.newTimer", "time.sendTime", "time.goFunc"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return fn == "runtime.timeSleep" || strings.HasPrefix(fn, "runtime.(*timer") ||
		fn == "runtime.checkTimers" || fn == "runtime.resetForSleep"
}

// isExecFrame reports whether fn starts or waits for a child process.
func isExecFrame(fn string) bool {
	switch fn {
	case "os.StartProcess", "syscall.forkExec", "syscall.StartProcess", "os.(*Process).Wait", "os/exec.(*Cmd).Start", "os/exec.(*Cmd).Wait", "os/exec.(*Cmd).Run", "os/exec.(*Cmd).Output", "os/exec.(*Cmd).CombinedOutput":
		return true
	}
	return false
}

// isNewprocFrame reports whether fn starts a goroutine (a go statement).
func isNewprocFrame(fn string) bool { return fn == "runtime.newproc" || fn == "runtime.newproc1" }

// servingFrames are the functions at the root of a server's request
// goroutines: net/http's per-connection loop and its HTTP/2 handler
// goroutines (bundled and x/net), gRPC's stream handling.
var servingFrames = []string{
	"net/http.(*conn).serve",
	"net/http.(*http2serverConn).runHandler",
	"golang.org/x/net/http2.(*serverConn).runHandler",
	"google.golang.org/grpc.(*Server).handleStream",
	"google.golang.org/grpc.(*Server).serveStreams.func1",
}

func isServingFrame(fn string) bool { return slices.Contains(servingFrames, fn) }

// libCallOf returns the call in a stack (frames leaf first) from the
// program's own code into a library that the library does not call back
// out of (a middleware calling net/http's mux, which calls the program's
// handler, is not where the time goes): the index of the caller frame, or
// -1. The callee is frames[i-1]; runtime functions are not library calls,
// except makeslice (a buffer allocated per call).
func libCallOf(frames []stacks.SymFrame) int {
	for i := len(frames) - 1; i > 0; i-- {
		if !ownFrame(frames[i]) {
			continue
		}
		c := frames[i-1]
		if c.Kernel || c.Unknown || ownFrame(c) {
			continue
		}
		pkg := funcPkg(c.Func)
		// sync is the lock rules' (time under Mutex.Lock is waiting, not
		// work); time.Sleep and friends wait too.
		if pkg == "" || pkg == "sync" || pkg == "sync/atomic" || pkg == "time" || strings.HasPrefix(pkg, "internal/") || strings.HasPrefix(pkg, "vendor/") ||
			(strings.HasPrefix(pkg, "runtime") && c.Func != "runtime.makeslice") {
			continue
		}
		if slices.ContainsFunc(frames[:i-1], ownFrame) {
			continue // the library calls back into the program: look deeper
		}
		return i
	}
	return -1
}

func summarizeStacks(p *stacks.Profile) *Stacks {
	s := &Stacks{Seconds: p.End.Sub(p.Start).Seconds(), Classes: map[string]float64{}, Callers: map[string][]Share{}, Sites: map[string][]Site{}}
	var total, kernel float64
	pkgs := map[string]float64{}
	funcs := map[string]float64{}
	kpaths := map[string]float64{}
	callers := map[string]map[string]float64{}
	addCaller := func(class, fn string, n float64) {
		if fn == "" {
			return
		}
		if callers[class] == nil {
			callers[class] = map[string]float64{}
		}
		callers[class][fn] += n
	}
	sites := map[string]map[Site]float64{}
	addSite := func(key string, frames []stacks.SymFrame, n float64) {
		f, ok := siteFrame(frames)
		if !ok {
			return
		}
		if sites[key] == nil {
			sites[key] = map[Site]float64{}
		}
		sites[key][Site{Func: f.Func, File: f.File, Line: f.Line}] += n
	}
	type libKey struct {
		callee string
		caller Site
	}
	libs := map[libKey]float64{}
	libLeaves := map[libKey]map[string]float64{}
	for _, st := range p.Stacks {
		n := float64(st.Count)
		total += n
		class := string(st.Class)
		switch st.Class {
		case stacks.ClassGCMark, stacks.ClassGCOther:
			s.Classes[ClassGCBackground] += n
		case stacks.ClassGCAssist:
			s.Classes[ClassGCAssist] += n
			addCaller(ClassGCAssist, firstCaller(st.Frames), n)
			addSite(ClassGCAssist, st.Frames, n)
		case stacks.ClassScheduler, stacks.ClassIdle:
			s.Classes[ClassScheduler] += n
			// Scheduler work under the program's code, outside a lock's
			// slow path: the code that wakes goroutines (closing a
			// channel) or parks them. A mutex's handoffs are the lock's.
			if !slices.ContainsFunc(st.Frames, func(f stacks.SymFrame) bool { return !f.Kernel && isLockFrame(f.Func) }) {
				addSite(ClassScheduler, st.Frames, n)
			}
		case stacks.ClassUser:
			s.Classes[ClassUserCode] += n
		}
		for _, f := range st.Frames {
			if !f.Kernel && isLockFrame(f.Func) && !waitGroupStack(st.Frames) {
				s.Classes[ClassLock] += n
				addCaller(ClassLock, firstCaller(st.Frames), n)
				addSite(ClassLock, st.Frames, n)
				break
			}
		}
		for _, f := range st.Frames {
			if !f.Kernel && isTimerFrame(f.Func) {
				addCaller("timer", firstCaller(st.Frames), n)
				addSite("timer", st.Frames, n)
				break
			}
		}
		for _, f := range st.Frames {
			if !f.Kernel && isExecFrame(f.Func) {
				addSite("exec", st.Frames, n)
				break
			}
		}
		for _, f := range st.Frames {
			if !f.Kernel && isNewprocFrame(f.Func) {
				addSite("newproc", st.Frames, n)
				break
			}
		}
		if slices.ContainsFunc(st.Frames, func(f stacks.SymFrame) bool { return !f.Kernel && isServingFrame(f.Func) }) {
			s.Serving += n
		}
		if i := libCallOf(st.Frames); i >= 0 {
			f := st.Frames[i]
			k := libKey{st.Frames[i-1].Func, Site{Func: f.Func, File: f.File, Line: f.Line}}
			libs[k] += n
			if libLeaves[k] == nil {
				libLeaves[k] = map[string]float64{}
			}
			libLeaves[k][st.Frames[0].Func] += n
		}
		inKernel := len(st.Frames) > 0 && st.Frames[0].Kernel
		if inKernel {
			kernel += n
			path := "syscall " + strings.TrimPrefix(class, stacks.ClassSyscallPrefix)
			if !strings.HasPrefix(class, stacks.ClassSyscallPrefix) {
				path = st.Frames[0].Func
				if strings.HasPrefix(class, "kernel") {
					path = class
				}
			}
			if path != "syscall unknown" {
				kpaths[path] += n
				if strings.HasPrefix(path, stacks.ClassSyscallPrefix) {
					addSite(path, st.Frames, n)
				}
			}
			addCaller("kernel", firstCaller(st.Frames), n)
			continue
		}
		// User-mode samples: which package is hot, and which code runs at all
		// (for an idle process woken by timers, the loop itself).
		leaf := ""
		for _, f := range st.Frames {
			if !f.Kernel {
				leaf = f.Func
				break
			}
		}
		if leaf != "" {
			funcs[leaf] += n
		}
		pkg := funcPkg(firstCaller(st.Frames))
		if pkg == "" {
			pkg = funcPkg(leaf)
		}
		if pkg != "" {
			pkgs[pkg] += n
		}
	}
	s.Samples = int(total)
	if total == 0 {
		return s
	}
	s.KernelShare = kernel / total
	s.Serving /= total
	for k := range s.Classes {
		s.Classes[k] /= total
	}
	s.Packages = shares(pkgs, total)
	s.Functions = shares(funcs, total)
	s.KernelPaths = shares(kpaths, total)
	for class, m := range callers {
		s.Callers[class] = shares(m, total)
	}
	for key, m := range sites {
		s.Sites[key] = siteShares(m, total)
	}
	for k, v := range libs {
		s.LibCalls = append(s.LibCalls, LibCall{Callee: k.callee, Caller: k.caller, Share: v / total, Leaves: shares(libLeaves[k], v)})
	}
	slices.SortFunc(s.LibCalls, func(a, b LibCall) int {
		return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Callee, b.Callee), cmp.Compare(a.Caller.Func, b.Caller.Func), cmp.Compare(a.Caller.Line, b.Caller.Line))
	})
	if len(s.LibCalls) > 10 {
		s.LibCalls = s.LibCalls[:10]
	}
	return s
}

// siteShares turns counts per site into shares of total, largest first, at
// most 5.
func siteShares(m map[Site]float64, total float64) []Site {
	out := make([]Site, 0, len(m))
	for k, v := range m {
		k.Share = v / total
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Func, b.Func), cmp.Compare(a.Line, b.Line))
	})
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}

// shares turns counts into shares of total, largest first, at most 10.
func shares(m map[string]float64, total float64) []Share {
	out := make([]Share, 0, len(m))
	for k, v := range m {
		out = append(out, Share{Name: k, Share: v / total})
	}
	SortShares(out)
	if len(out) > 10 {
		out = out[:10]
	}
	return out
}

// DumpGoroutineRise is the rise of the goroutine count over a window at
// which RuntimeLook takes a goroutine dump (to name the go statement behind
// a leak); the doctor's leak rule starts at the same rise.
const DumpGoroutineRise = 100

// RuntimeLook reads a Go program's runtime metrics at the start and end of
// its time (from the gosleuth agent, or the pprof / metrics URLs given).
type RuntimeLook struct {
	// PprofURL and MetricsURL are passed to goruntime.Connect.
	PprofURL, MetricsURL string
	// ProcRoot is the procfs mount the target is read through ("" is /proc).
	ProcRoot string
}

// Source implements Look.
func (RuntimeLook) Source() Source { return SourceRuntime }

// Look implements Look.
func (l RuntimeLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	if !w.IsGo() {
		return nil
	}
	src, _, err := goruntime.Connect(ctx, pid, goruntime.Options{PprofURL: l.PprofURL, MetricsURL: l.MetricsURL, ProcRoot: l.ProcRoot})
	if err != nil {
		if errors.Is(err, goruntime.ErrNoSource) {
			return nil // the rules say what is missing and how to add it
		}
		return fmt.Errorf("connect to the runtime: %w", err)
	}
	defer src.Close()
	a, err := src.Read(ctx)
	if err != nil {
		return fmt.Errorf("read runtime metrics: %w", err)
	}
	books := startBooks(src, l.ProcRoot, pid)
	defer books.close()
	// Leave a moment for the last read before the window ends.
	t := time.NewTimer(max(d-300*time.Millisecond, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, err := src.Read(rctx)
	if err != nil {
		return fmt.Errorf("read runtime metrics: %w", err)
	}
	w.Runtime, w.Go = RuntimeOf(src.Kind(), a, b, w.Go)
	w.Runtime.Books = books.finish()
	// A rising count: take one goroutine dump, to name the go statement
	// that starts them and where they wait. Only then, as a dump stops the
	// world for a moment.
	if w.Runtime.GoroutinesEnd-w.Runtime.GoroutinesStart >= DumpGoroutineRise {
		if d, err := src.Goroutines(rctx); err == nil {
			w.Runtime.Groups = goroutineGroups(d, 3)
		}
	}
	return nil
}

// goroutineGroups keeps the n largest groups of a dump.
func goroutineGroups(d *goruntime.GoroutineDump, n int) []GoroutineGroup {
	var out []GoroutineGroup
	for _, g := range d.Groups {
		if len(out) == n {
			break
		}
		gg := GoroutineGroup{Count: g.Count, State: g.State}
		for _, f := range g.Frames {
			if pkg := funcPkg(f.Func); pkg != "" && !stdlibPkg(pkg) {
				gg.WaitsIn = Site{Func: f.Func, File: f.File, Line: f.Line}
				break
			}
		}
		if gg.WaitsIn.Func == "" && len(g.Frames) > 0 {
			f := g.Frames[0]
			gg.WaitsIn = Site{Func: f.Func, File: f.File, Line: f.Line}
		}
		if c := g.CreatedBy; c != nil {
			gg.CreatedBy = Site{Func: c.Func, File: c.File, Line: c.Line}
		}
		out = append(out, gg)
	}
	return out
}

// RuntimeOf turns two runtime samples of a process, a before b, taken from
// a source of the given kind, into the window's Runtime, and returns the
// GoFacts with the live GOMAXPROCS when the source gives it (else goFacts
// unchanged).
func RuntimeOf(kind string, a, b *goruntime.Sample, goFacts *GoFacts) (*Runtime, *GoFacts) {
	win := RuntimeBetween(a, b)
	nan := math.NaN()
	known := func(k goruntime.Known, v float64) float64 {
		if win.Known&k == 0 {
			return nan
		}
		return v
	}
	rt := &Runtime{
		From:            kind,
		Seconds:         win.Duration.Seconds(),
		GoroutinesStart: known(goruntime.KnownGoroutines, float64(a.Goroutines)),
		GoroutinesEnd:   known(goruntime.KnownGoroutines, float64(b.Goroutines)),
		GCCycles:        float64(win.GCCycles),
		GCCPUShare:      win.GCCPUShare,
		AssistShare:     win.AssistShare,
		SchedLatP99:     win.SchedP99,
		MutexWaitPerSec: nan,
		HeapLive:        nan,
		HeapObjects:     nan,
	}
	if win.Known&goruntime.KnownMutexWait != 0 {
		rt.MutexWaitPerSec = win.MutexWaitPerSec
	}
	if win.Known&goruntime.KnownHeapLive != 0 {
		rt.HeapLive = float64(win.HeapLive)
	}
	if win.Known&goruntime.KnownHeapObjects != 0 {
		rt.HeapObjects = float64(win.HeapObjects)
	}
	if win.Known&goruntime.KnownSchedLatency == 0 {
		rt.SchedLatP99 = nan
	}
	if win.Known&goruntime.KnownCPUClasses == 0 {
		rt.GCCPUShare, rt.AssistShare = nan, nan
	}
	if win.Known&goruntime.KnownGOMAXPROCS != 0 && win.GOMAXPROCS > 0 {
		goFacts = &GoFacts{GOMAXPROCS: int(win.GOMAXPROCS), GOMAXPROCSFrom: "runtime (" + kind + ")"}
	}
	return rt, goFacts
}
