package probe

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Recipe is a named set of probes for one question, and the pure function
// that answers it from what they saw.
type Recipe struct {
	Name string
	// Doc says what the recipe finds.
	Doc    string
	Probes []Probe
	// Answer turns the result into plain statements, most telling first.
	Answer func(r *Result) []string
}

// Recipes are the built-in recipes by name. Names that moved between Go
// versions are resolved by Target.Find.
var Recipes = map[string]Recipe{
	"locks": {
		Name: "locks",
		Doc:  "mutex contention: goroutines that park on a sync.Mutex or RWMutex, by caller and by mutex, and slow-path Lock calls",
		// The parks come first: they are what contention costs, and the
		// doctor's rule counts them. Each reads its semaphore's address
		// (AX), which sits at a fixed offset in the mutex (MutexOf).
		// lockSlow runs at every failed fast path, spinning included, so
		// it is often too hot to probe (300,000-750,000 calls a second on
		// a contended RWMutex); it names the callers of mild contention.
		Probes: []Probe{
			{Func: "sync.runtime_SemacquireMutex", Arg: RAX, Stacks: true},
			{Func: "sync.runtime_SemacquireRWMutexR", Arg: RAX, Stacks: true},
			{Func: "sync.runtime_SemacquireRWMutex", Arg: RAX, Stacks: true},
			{Func: "sync.(*Mutex).lockSlow", Arg: RAX, Stacks: true},
		},
		Answer: answerLocks,
	},
	"timers": {
		Name: "timers",
		Doc:  "sleep and timer loops: time.Sleep by caller and duration, timer and ticker channel receives by caller, new tickers by period",
		Probes: []Probe{
			{Func: "time.Sleep", Arg: RAX, Stacks: true},
			{Func: "runtime.chanrecv1", Stacks: true},
			{Func: "runtime.chanrecv2", Stacks: true},
			{Func: "runtime.blockTimerChan", Arg: RAX},
			{Func: "time.NewTicker", Arg: RAX, Stacks: true},
			// A loop on a Timer re-arms it each round (t.Reset(d), its
			// duration the second argument): select-based loops and
			// re-armed AfterFuncs receive through selectgo or not at
			// all, so Reset is where they show.
			{Func: "time.(*Timer).Reset", Arg: RBX, Stacks: true},
			// A Ticker loop that waits in a select (for <-t.C or a
			// stop channel) calls neither: selectgo at the tick's rate,
			// from the loop, names it (the governor leaves it out where
			// selects are too hot to probe).
			{Func: "runtime.selectgo", Stacks: true},
		},
		Answer: answerTimers,
	},
	"goroutines": {
		Name: "goroutines",
		Doc:  "goroutines created and exited per second, and where they are created",
		Probes: []Probe{
			{Func: NewprocFunc, Stacks: true},
			{Func: GoexitFunc},
		},
		Answer: answerGoroutines,
	},
	"parks": {
		Name: "parks",
		Doc:  "where goroutines park (block): the program's own frame nearest each park, and the function its goroutine started in",
		// Every blocking wait (channel, select, mutex, sleep, network)
		// parks through runtime.gopark, so it is hot in a busy server
		// (2,100 calls a second in an HTTP server at 1,000 requests a
		// second): the governor leaves it out where it would cost more
		// than the budget.
		Probes: []Probe{
			{Func: Gopark, Stacks: true},
		},
		Answer: answerParks,
	},
	"exec": {
		Name: "exec",
		Doc:  "programs started: callers of os/exec and os.StartProcess",
		Probes: []Probe{
			{Func: "os/exec.(*Cmd).Start", Stacks: true},
			{Func: "os.StartProcess", Stacks: true},
		},
		Answer: answerCalls("starts a program", "os/exec.(*Cmd).Start", "os.StartProcess"),
	},
	"files": {
		Name: "files",
		Doc:  "files opened: callers of os.OpenFile",
		Probes: []Probe{
			{Func: "os.OpenFile", Stacks: true},
		},
		Answer: answerCalls("opens a file", "os.OpenFile"),
	},
	"gcassist": {
		Name: "gcassist",
		Doc:  "GC mark assist: how often allocating goroutines are made to mark, and the code that allocates",
		Probes: []Probe{
			{Func: "runtime.gcAssistAlloc", Stacks: true},
			{Func: "runtime.gcStart"},
		},
		Answer: answerGCAssist,
	},
}

// RecipeNames lists the recipes in a stable order.
func RecipeNames() []string {
	var out []string
	for n := range Recipes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Statements is what the recipe says of r: Answer's statements, then one
// naming the recipe's functions that were not measured because they were
// too hot to probe, and one for each function sampled in bursts, with its
// duty cycle (its figures are estimates). A recipe whose busiest function
// was left out must never read as "nothing seen".
func (rc Recipe) Statements(r *Result) []string {
	out := rc.Answer(r)
	var hot []string
	for _, p := range rc.Probes {
		for _, f := range r.Funcs {
			if (f.Func == p.Func || f.Symbol == p.Func) && strings.HasPrefix(f.Skipped, "too hot") && !slices.Contains(hot, f.Func) {
				hot = append(hot, f.Func)
			}
		}
	}
	if len(hot) > 0 {
		out = append(out, "not measured (too hot to probe): "+strings.Join(hot, ", "))
	}
	// A function probed in bursts: its figures above are estimates.
	var sampled []string
	for _, p := range rc.Probes {
		for _, f := range r.Funcs {
			if (f.Func == p.Func || f.Symbol == p.Func) && f.Sampled != nil && f.Skipped == "" && !slices.Contains(sampled, f.Func) {
				sampled = append(sampled, f.Func)
				out = append(out, fmt.Sprintf("%s sampled in %s, attached %.1f%% of the window (too hot to probe throughout): %.0f ± %.0f calls a second estimated from %d counted",
					f.Func, f.Sampled.BurstsText(), 100*f.Sampled.Duty, f.PerSec, f.Sampled.PerSecMargin, f.Sampled.Counted))
			}
		}
	}
	return out
}

func stat(r *Result, fn string) (FuncStat, bool) {
	for _, f := range r.Funcs {
		if f.Func == fn && f.Skipped == "" {
			return f, true
		}
	}
	return FuncStat{}, false
}

func site(c Caller) string {
	if c.File == "" {
		return c.Func
	}
	return fmt.Sprintf("%s (%s:%d)", c.Func, c.File, c.Line)
}

// Semaphore sleeps of sync's mutexes (the functions the runtime parks a
// goroutine in), and where their semaphore sits in the mutex: Mutex{state
// int32; sema uint32}, RWMutex{w Mutex; writerSem, readerSem uint32; ...}
// (the same layout in every Go version with the register ABI).
const (
	SemacquireMutex    = "sync.runtime_SemacquireMutex"
	SemacquireRWMutexR = "sync.runtime_SemacquireRWMutexR"
	SemacquireRWMutex  = "sync.runtime_SemacquireRWMutex"
)

// semaOffsets are the offsets of each semaphore in its mutex.
var semaOffsets = map[string]uint64{
	SemacquireMutex: 4, "internal/sync.runtime_SemacquireMutex": 4,
	SemacquireRWMutexR: 12, SemacquireRWMutex: 8,
}

// MutexOf returns the address of the mutex whose semaphore at sema a
// goroutine parked on in fn (one of the Semacquire functions), and false
// for any other function. A writer of an RWMutex parks on the RWMutex's
// inner Mutex first, so all three name the RWMutex itself.
func MutexOf(fn string, sema uint64) (uint64, bool) {
	off, ok := semaOffsets[fn]
	if !ok || sema < off {
		return 0, false
	}
	return sema - off, true
}

func answerLocks(r *Result) []string {
	var out []string
	parks := 0.0
	for _, fn := range []string{SemacquireMutex, SemacquireRWMutexR, SemacquireRWMutex} {
		f, ok := stat(r, fn)
		if !ok || f.Count == 0 {
			continue
		}
		parks += f.PerSec
		s := fmt.Sprintf("%s: goroutines parked %.0f times a second", fn, f.PerSec)
		if len(f.Callers) > 0 {
			s += ", mostly from " + site(f.Callers[0])
		}
		if len(f.Args) > 0 {
			if m, ok := MutexOf(fn, f.Args[0].Value); ok {
				s += fmt.Sprintf(", %.0f%% on the mutex at %#x", 100*f.Args[0].Share, m)
			}
		}
		out = append(out, s)
	}
	if f, ok := stat(r, "sync.(*Mutex).lockSlow"); ok {
		if f.Count == 0 && parks == 0 {
			out = append(out, "no mutex contention: sync.Mutex.Lock never took its slow path and no goroutine parked on a mutex")
		} else if f.Count > 0 {
			out = append(out, fmt.Sprintf("Mutex.Lock took the slow path %.0f times a second", f.PerSec))
			for _, c := range f.Callers[:min(len(f.Callers), 3)] {
				out = append(out, fmt.Sprintf("%.0f%% from %s", 100*c.Share, site(c)))
			}
		}
	}
	if parks > 0 {
		out = append([]string{fmt.Sprintf("goroutines parked on sync mutexes %.0f times a second", parks)}, out...)
	}
	return out
}

func answerTimers(r *Result) []string {
	var out []string
	for _, fn := range []string{"time.Sleep", "time.(*Timer).Reset"} {
		f, ok := stat(r, fn)
		if !ok || f.Count == 0 {
			continue
		}
		s := fmt.Sprintf("%s %.0f times a second", fn, f.PerSec)
		if len(f.Callers) > 0 {
			s += " from " + site(f.Callers[0])
		}
		if len(f.Args) > 0 {
			s += fmt.Sprintf(", for %s in %.0f%% of calls", time.Duration(f.Args[0].Value), 100*f.Args[0].Share)
		}
		out = append(out, s)
	}
	for _, fn := range []string{"runtime.chanrecv1", "runtime.chanrecv2"} {
		if f, ok := stat(r, fn); ok && f.Count > 0 {
			s := fmt.Sprintf("channel receives (%s) %.0f times a second", fn, f.PerSec)
			if len(f.Callers) > 0 {
				s += ", mostly in " + site(f.Callers[0])
			}
			out = append(out, s)
		}
	}
	if f, ok := stat(r, "runtime.blockTimerChan"); ok && f.Count > 0 {
		out = append(out, fmt.Sprintf("%.0f receives a second wait on a timer or ticker channel (%d channels)", f.PerSec, len(f.Args)))
	}
	if f, ok := stat(r, "time.NewTicker"); ok && f.Count > 0 && len(f.Args) > 0 {
		out = append(out, fmt.Sprintf("time.NewTicker %.0f times a second, period %s", f.PerSec, time.Duration(f.Args[0].Value)))
	}
	return out
}

func answerGoroutines(r *Result) []string {
	np, ok1 := stat(r, "runtime.newproc")
	ex, ok2 := stat(r, "runtime.goexit1")
	if !ok1 || !ok2 {
		return nil
	}
	out := []string{fmt.Sprintf("goroutines created %.0f/s, exited %.0f/s: net %+.0f/s", np.PerSec, ex.PerSec, np.PerSec-ex.PerSec)}
	for _, c := range np.Callers[:min(len(np.Callers), 3)] {
		out = append(out, fmt.Sprintf("%.0f%% created by %s", 100*c.Share, site(c)))
	}
	return out
}

// NewprocFunc starts a goroutine (a go statement); GoexitFunc ends one.
const (
	NewprocFunc = "runtime.newproc"
	GoexitFunc  = "runtime.goexit1"
)

// Gopark is where the runtime parks a goroutine that blocks, whatever it
// waits for.
const Gopark = "runtime.gopark"

// EntryOf returns the function a goroutine started in, from a sampled
// stack listed innermost first (Caller.Stack): the frame just inside
// runtime.goexit, the outermost frame of every goroutine. It returns ""
// when the stack was cut short of runtime.goexit.
func EntryOf(stack []string) string {
	i := slices.Index(stack, "runtime.goexit")
	if i < 1 {
		return ""
	}
	return stack[i-1]
}

func answerParks(r *Result) []string {
	f, ok := stat(r, Gopark)
	if !ok || f.Count == 0 {
		return nil
	}
	out := []string{fmt.Sprintf("goroutines parked %.0f times a second", f.PerSec)}
	for _, c := range f.Callers[:min(len(f.Callers), 5)] {
		s := fmt.Sprintf("%.0f/s in %s", f.PerSec*c.Share, site(c))
		if e := EntryOf(c.Stack); e != "" {
			s += ", goroutines started in " + e
		}
		out = append(out, s)
	}
	return out
}

func answerGCAssist(r *Result) []string {
	f, ok := stat(r, "runtime.gcAssistAlloc")
	if !ok {
		return nil
	}
	s := fmt.Sprintf("mark assist %.0f times a second", f.PerSec)
	if g, ok := stat(r, "runtime.gcStart"); ok {
		s += fmt.Sprintf(" (%.1f GC cycles a second)", g.PerSec)
	}
	out := []string{s}
	for _, c := range f.Callers[:min(len(f.Callers), 3)] {
		// The program's own frame in the stack is the allocation site.
		out = append(out, fmt.Sprintf("%.0f%% under %s", 100*c.Share, ownSite(c)))
	}
	return out
}

// ownSite is the first frame of a caller's stack outside the standard
// library's plumbing.
func ownSite(c Caller) string {
	for _, fn := range c.Stack {
		if !isRuntime(fn) {
			return fn
		}
	}
	return site(c)
}

func isRuntime(fn string) bool {
	for _, p := range []string{"runtime.", "internal/", "sync.", "syscall.", "os.", "os/exec.", "time."} {
		if len(fn) >= len(p) && fn[:len(p)] == p {
			return true
		}
	}
	return false
}

func answerCalls(what string, fns ...string) func(r *Result) []string {
	return func(r *Result) []string {
		var out []string
		for _, fn := range fns {
			f, ok := stat(r, fn)
			if !ok || f.Count == 0 {
				continue
			}
			for _, c := range f.Callers[:min(len(f.Callers), 3)] {
				out = append(out, fmt.Sprintf("%s %s %.0f times a second (%s)", ownSite(c), what, f.PerSec*c.Share, fn))
			}
			if len(f.Callers) == 0 {
				out = append(out, fmt.Sprintf("%s %.0f times a second", fn, f.PerSec))
			}
			break
		}
		return out
	}
}
