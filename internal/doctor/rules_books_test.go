package doctor

import (
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/window"
)

// booksWin is a window of a Go process whose books were read.
func booksWin(cores float64, b *window.Books, f func(w *Window)) *Window {
	return win(4, func(w *Window) {
		w.UserSec = cores * 4
		w.Runtime = nanRuntime()
		w.Runtime.From = "memory"
		if b.Seconds == 0 {
			b.Seconds = 4
		}
		w.Runtime.Books = b
		if f != nil {
			f(w)
		}
	})
}

func site(fn string, line int) window.Site {
	return window.Site{Func: fn, File: "/src/main.go", Line: line}
}

func heapSite(fn string, line int, bytes, objects int64) window.HeapSite {
	s := site(fn, line)
	return window.HeapSite{Site: s, Own: s, InUseBytes: bytes, InUseObjects: objects}
}

// TestGoroutineMemory: parked goroutines are added up by the function that
// starts them; what they hold is judged against the Go memory, with the
// heap only where the profile attributes it to them.
func TestGoroutineMemory(t *testing.T) {
	const MB = 1 << 20
	group := func(n int, state, start string, stack uint64, heap int64) window.BookGroup {
		return window.BookGroup{Count: n, State: state, Start: site(start, 10), CreatedBy: site("main.acceptLoop", 40), WaitsIn: site(start, 12),
			StackBytes: stack, HeapBytes: heap, HeapObjects: int64(n)}
	}
	gc := func(marked uint64) window.BookGC { return window.BookGC{HeapMarked: marked, StackInUse: 8 * MB} }
	for _, tc := range []struct {
		name string
		b    *window.Books
		sev  Severity // -1: no finding
		want string
	}{
		{"gateway", &window.Books{HeapProfile: true, End: gc(270 * MB), Groups: []window.BookGroup{group(4000, "IO wait", "main.handle", 8*MB, 250*MB)}},
			Warn, "4000 goroutines parked in main.handle hold 8 MB of stacks and 262 MB of heap allocated under them"},
		// A reader and a writer per connection: one accept loop's two groups.
		{"reader and writer", &window.Books{HeapProfile: true, End: gc(200 * MB), Groups: []window.BookGroup{
			group(3000, "IO wait", "main.read", 6*MB, 45*MB), group(3000, "chan receive", "main.write", 6*MB, 45*MB)}},
			Warn, "6000 goroutines parked in main.read"},
		// Most of the heap is elsewhere (a cache): the goroutines' part is
		// below a third.
		{"small share", &window.Books{HeapProfile: true, End: gc(900 * MB), Groups: []window.BookGroup{group(4000, "IO wait", "main.handle", 8*MB, 100*MB)}}, -1, ""},
		{"without the heap profile", &window.Books{HeapProfile: false, HeapProfileWhy: "off", End: gc(100 * MB), Groups: []window.BookGroup{group(10000, "IO wait", "main.handle", 20*MB, -1)}},
			Info, "10000 goroutines parked in main.handle hold 21 MB of stacks"},
		{"few", &window.Books{HeapProfile: true, End: gc(20 * MB), Groups: []window.BookGroup{group(20, "IO wait", "main.handle", MB/10, 2*MB)}}, -1, ""},
		{"working, not parked", &window.Books{HeapProfile: true, End: gc(100 * MB), Groups: []window.BookGroup{group(4000, "runnable", "main.work", 8*MB, 90*MB)}}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := checkGoroutineMemory(booksWin(0.02, tc.b, nil), &Host{CPUs: 2})
			if tc.sev < 0 {
				if f != nil {
					t.Fatalf("finding %q, want none", f.Title)
				}
				return
			}
			if f == nil {
				t.Fatal("no finding")
			}
			if f.Severity != tc.sev || !strings.HasPrefix(f.Title, tc.want) {
				t.Errorf("%s %q, want %s %q", f.Severity, f.Title, tc.sev, tc.want)
			}
			if len(f.Code) == 0 || f.Code[0].Func != "main.acceptLoop" || f.Code[0].Line != 40 {
				t.Errorf("code %+v, want the go statements in main.acceptLoop first", f.Code)
			}
		})
	}
}

// TestHeapHolders: millions of small objects from one site in a
// pointer-rich heap warn when the GC costs, inform when it does not; a
// pointer-free heap of the same size only has its holders named.
func TestHeapHolders(t *testing.T) {
	const MB = 1 << 20
	cache := func(scan uint64) *window.Books {
		top := heapSite("main.fill", 20, 230*MB, 6_000_000)
		return &window.Books{HeapProfile: true, HeapInUseBytes: 300 * MB, HeapInUseObjects: 8_000_000,
			TopBytes: []window.HeapSite{top}, TopObjects: []window.HeapSite{top},
			End: window.BookGC{HeapMarked: 320 * MB, ScanHeap: scan, HeapObjects: 11_000_000}}
	}
	gcStacks := func(share float64) func(w *Window) {
		return func(w *Window) {
			w.Stacks = &Stacks{Samples: 500, Classes: map[string]float64{ClassGCBackground: share, ClassUserCode: 1 - share}}
		}
	}
	for _, tc := range []struct {
		name  string
		w     *Window
		sev   Severity
		title string
	}{
		{"pointer-rich, GC costly", booksWin(0.5, cache(250*MB), gcStacks(0.45)), Warn, "6.0 M small pointer-rich objects allocated at main.fill hold the live heap"},
		{"pointer-rich, GC quiet", booksWin(0.5, cache(250*MB), gcStacks(0.01)), Info, "6.0 M small pointer-rich objects allocated at main.fill hold the live heap"},
		{"pointer-free", booksWin(0.5, cache(MB), gcStacks(0.45)), Info, "the live heap (336 MB) is held by main.fill"},
		// The GC costly but running 30 times a second: the program
		// allocates its live heap again every 33 ms, which gc-pressure
		// names; the holder is information.
		{"pointer-rich, cycles driven by allocation", booksWin(0.5, func() *window.Books {
			b := cache(250 * MB)
			b.Start.Cycles, b.End.Cycles = 100, 220
			return b
		}(), gcStacks(0.45)), Info, "6.0 M small pointer-rich objects allocated at main.fill hold the live heap"},
		{"pointer-rich, GC costly, cycles slow", booksWin(0.5, func() *window.Books {
			b := cache(250 * MB)
			b.Start.Cycles, b.End.Cycles = 100, 108
			return b
		}(), gcStacks(0.45)), Warn, "6.0 M small pointer-rich objects allocated at main.fill hold the live heap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := checkHeapHolders(tc.w, &Host{CPUs: 2})
			if f == nil {
				t.Fatal("no finding")
			}
			if f.Severity != tc.sev || f.Title != tc.title {
				t.Errorf("%s %q, want %s %q", f.Severity, f.Title, tc.sev, tc.title)
			}
			if f.Severity == Warn && !strings.Contains(f.Fix, "without pointers") {
				t.Errorf("fix %q lacks the pointer-free advice", f.Fix)
			}
		})
	}
	small := &window.Books{HeapProfile: true, HeapInUseBytes: 10 * MB, TopBytes: []window.HeapSite{heapSite("main.f", 1, 10*MB, 100)}, End: window.BookGC{HeapMarked: 10 * MB}}
	if f := checkHeapHolders(booksWin(0.5, small, nil), &Host{CPUs: 2}); f != nil {
		t.Errorf("a 10 MB heap got %q", f.Title)
	}
}

// TestGoroutineChurn: a goroutine per couple of microseconds of CPU with
// the scheduler taking a large share warns; the same rate in a process
// doing more per goroutine, or a cheap one, is information.
func TestGoroutineChurn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cores   float64
		created uint64
		sched   float64
		sev     Severity
	}{
		{"per tiny task", 0.6, 4_000_000, 0.48, Warn},
		{"fan-out at a light load", 0.05, 64_000, 0.26, Info},
		{"work per goroutine", 1.5, 60_000, 0.05, Info},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &window.Books{Created: tc.created, CreatedKnown: true}
			w := booksWin(tc.cores, b, func(w *Window) {
				w.Stacks = &Stacks{Samples: 500, Classes: map[string]float64{ClassScheduler: tc.sched},
					Sites: map[string][]Site{"newproc": {{Func: "main.spawn", File: "/src/main.go", Line: 7, Share: 0.2}}}}
			})
			f := checkGoroutineChurn(w, &Host{CPUs: 2})
			if f == nil {
				t.Fatal("no finding")
			}
			if f.Severity != tc.sev {
				t.Errorf("%s %q, want %s", f.Severity, f.Title, tc.sev)
			}
			if len(f.Code) == 0 || f.Code[0].Func != "main.spawn" {
				t.Errorf("code %+v, want main.spawn", f.Code)
			}
		})
	}
	if f := checkGoroutineChurn(booksWin(0.5, &window.Books{Created: 1000, CreatedKnown: true}, nil), &Host{CPUs: 2}); f != nil {
		t.Errorf("250 goroutines a second got %q", f.Title)
	}
}

// TestConnChurn: dials counted by getsockopt with about one write each
// warn on the client; accepts with one write each inform on the server;
// connections carrying many requests, or long-lived ones, are nothing.
func TestConnChurn(t *testing.T) {
	sys := func(counts map[string]uint64) *Window {
		return win(4, func(w *Window) {
			w.UserSec = 0.2
			w.Syscalls = &Syscalls{Seconds: 4, Counts: counts}
		})
	}
	for _, tc := range []struct {
		name   string
		counts map[string]uint64
		sev    Severity // -1: none
		title  string
	}{
		{"client per request", map[string]uint64{"getsockopt": 1200, "setsockopt": 6000, "close": 1200, "epoll_ctl": 2400, "write": 1300}, Warn,
			"a new connection per request: 300 dials a second, 1.1 writes on each"},
		{"client, a few dials", map[string]uint64{"getsockopt": 80, "setsockopt": 400, "close": 80, "epoll_ctl": 160, "write": 80}, Info,
			"a new connection per request: 20 dials a second, 1.0 writes on each"},
		// accept4 is called twice per connection (the second returns EAGAIN).
		{"server", map[string]uint64{"accept4": 2000, "setsockopt": 5000, "close": 1000, "epoll_ctl": 2000, "write": 1000}, Info,
			"clients open a new connection per request: 250 accepts a second, 1.0 writes on each"},
		{"keep-alive client", map[string]uint64{"getsockopt": 8, "setsockopt": 40, "close": 8, "epoll_ctl": 16, "write": 4000}, -1, ""},
		{"long-lived connections", map[string]uint64{"getsockopt": 400, "setsockopt": 2000, "close": 10, "epoll_ctl": 400, "write": 400}, -1, ""},
		{"getsockopt without dials", map[string]uint64{"getsockopt": 4000, "close": 4000, "write": 100}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := checkConnChurn(sys(tc.counts), &Host{CPUs: 2})
			if tc.sev < 0 {
				if f != nil {
					t.Fatalf("finding %q, want none", f.Title)
				}
				return
			}
			if f == nil {
				t.Fatal("no finding")
			}
			if f.Severity != tc.sev || f.Title != tc.title {
				t.Errorf("%s %q, want %s %q", f.Severity, f.Title, tc.sev, tc.title)
			}
		})
	}
}

// TestConnChurnFromStacks: without syscall counts, a client caught in
// connect in a fifth of its samples is named as information.
func TestConnChurnFromStacks(t *testing.T) {
	w := win(4, func(w *Window) {
		w.UserSec = 0.3
		w.Stacks = &Stacks{Samples: 200, KernelPaths: []Share{{Name: "syscall connect", Share: 0.2}, {Name: "syscall close", Share: 0.06}},
			LibCalls: []LibCall{{Callee: "net/http.(*Client).Get", Caller: Site{Func: "main.fetch", File: "/src/main.go", Line: 9}, Share: 0.3}}}
	})
	f := checkConnChurn(w, &Host{CPUs: 2})
	if f == nil || f.Severity != Info || len(f.Code) == 0 || f.Code[0].Func != "main.fetch" {
		t.Fatalf("finding %+v, want information naming main.fetch", f)
	}
}
