package web

import (
	"math"
	"strconv"
)

// col names one series a watch records each second. The page reads the
// names and units from the history reply, so the order here is the wire
// order and nothing else depends on it.
type col int

// The recorded series. NaN means unknown (a source that is not there, or
// the gap after the sampler was stopped and started again).
const (
	colT        col = iota // seconds since the Unix epoch
	colUsr                 // CPU in user mode, % of one core
	colSys                 // CPU in kernel mode, % of one core
	colCUsr                // CPU of children reaped in the interval, user, % of one core
	colCSys                // same, kernel
	colWake                // voluntary context switches per second (wake-ups), all threads
	colInvol               // involuntary context switches per second
	colRunQ                // time runnable but waiting for a CPU, % of one core
	colThreads             // OS threads
	colMaxProcs            // GOMAXPROCS (runtime source, else computed from outside)
	colRSS                 // resident memory, bytes
	colFDs                 // open descriptors
	colFDLimit             // soft RLIMIT_NOFILE (NaN when unlimited or unknown)
	colSysR                // read-like syscalls per second (/proc/PID/io syscr)
	colSysW                // write-like syscalls per second (syscw)
	// Exact syscall counts per second, by kind (exact mode only).
	colXFutex
	colXPoll
	colXSleep
	colXRead
	colXWrite
	colXOpen
	colXMem
	colXOther
	// Go runtime (runtime source only).
	colGCShare    // GC share of the process's busy CPU over the last 2+ cycles, %
	colGCCycles   // GC cycles per second
	colHeapLive   // heap marked live at the last GC, bytes
	colHeapGoal   // heap goal, bytes
	colHeapAlloc  // heap objects' bytes, live and not yet swept
	colGoroutines // goroutines
	colSchedP99   // scheduling latency p99 over the last 5 s, ms
	numCols
)

// colInfo is a series' wire name and unit.
var colInfo = [numCols]struct{ name, unit string }{
	colT:          {"t", "s"},
	colUsr:        {"usr", "%"},
	colSys:        {"sys", "%"},
	colCUsr:       {"cusr", "%"},
	colCSys:       {"csys", "%"},
	colWake:       {"wake", "/s"},
	colInvol:      {"invol", "/s"},
	colRunQ:       {"runq", "%"},
	colThreads:    {"threads", ""},
	colMaxProcs:   {"gomaxprocs", ""},
	colRSS:        {"rss", "B"},
	colFDs:        {"fds", ""},
	colFDLimit:    {"fdlimit", ""},
	colSysR:       {"sysr", "/s"},
	colSysW:       {"sysw", "/s"},
	colXFutex:     {"x_futex", "/s"},
	colXPoll:      {"x_poll", "/s"},
	colXSleep:     {"x_sleep", "/s"},
	colXRead:      {"x_read", "/s"},
	colXWrite:     {"x_write", "/s"},
	colXOpen:      {"x_open", "/s"},
	colXMem:       {"x_mem", "/s"},
	colXOther:     {"x_other", "/s"},
	colGCShare:    {"gc_share", "%"},
	colGCCycles:   {"gc_cycles", "/s"},
	colHeapLive:   {"heap_live", "B"},
	colHeapGoal:   {"heap_goal", "B"},
	colHeapAlloc:  {"heap_alloc", "B"},
	colGoroutines: {"goroutines", ""},
	colSchedP99:   {"sched_p99", "ms"},
}

// point is one row of series values.
type point [numCols]float64

// blank returns a row of unknowns at time t.
func blank(t float64) point {
	var p point
	for i := range p {
		p[i] = math.NaN()
	}
	p[colT] = t
	return p
}

// ring holds the last cap rows, column by column, so a reply can write a
// column without gathering it. seq numbers rows from 1 and never repeats,
// so viewers resume by sequence number (SSE's Last-Event-ID).
type ring struct {
	cols [numCols][]float64
	n    int    // rows held
	head int    // where the next row goes
	seq  uint64 // sequence number of the newest row (0: none yet)
}

func newRing(capacity int) *ring {
	r := &ring{}
	for i := range r.cols {
		r.cols[i] = make([]float64, capacity)
	}
	return r
}

func (r *ring) capacity() int { return len(r.cols[0]) }

func (r *ring) add(p *point) {
	for i := range r.cols {
		r.cols[i][r.head] = p[i]
	}
	r.head = (r.head + 1) % r.capacity()
	r.n = min(r.n+1, r.capacity())
	r.seq++
}

// oldest is the sequence number of the oldest row held (seq+1 when empty).
func (r *ring) oldest() uint64 { return r.seq - uint64(r.n) + 1 }

// at returns the value of c in row seq, which must be held.
func (r *ring) at(seq uint64, c col) float64 {
	back := int(r.seq - seq) // 0 for the newest
	i := (r.head - 1 - back + 2*r.capacity()) % r.capacity()
	return r.cols[c][i]
}

// appendJSON writes the rows after seq as {"seq":N,"cols":[[...],...]},
// N being the newest row's sequence number: columns so the page hands
// them to the charts as they are.
func (r *ring) appendJSON(b []byte, after uint64) []byte {
	from := max(after+1, r.oldest())
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.seq, 10)
	b = append(b, `,"cols":[`...)
	for c := range numCols {
		if c > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for s := from; s <= r.seq; s++ {
			if s > from {
				b = append(b, ',')
			}
			b = appendNum(b, r.at(s, c), c == colT)
		}
		b = append(b, ']')
	}
	return append(b, "]}"...)
}

// appendNum writes v as JSON: null for NaN or infinities, times with
// millisecond precision, other values with 5 significant digits (finer
// than any chart shows, and half the bytes of full precision).
func appendNum(b []byte, v float64, isTime bool) []byte {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return append(b, "null"...)
	case isTime:
		return strconv.AppendFloat(b, v, 'f', 3, 64)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', 5, 64)
}
