package load

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: values are microseconds from 1 µs to 60 s at three
// significant digits (0.1% precision).
const (
	histLowest  = 1
	histHighest = 60_000_000
	histDigits  = 3
)

func newHist() *hdr.Histogram { return hdr.New(histLowest, histHighest, histDigits) }

// recordUS records a duration in nanoseconds as microseconds, clamped into
// the histogram's range.
func recordUS(h *hdr.Histogram, ns int64) { h.RecordValue(int64(clampUS(ns))) }

// clampUS is a duration in nanoseconds as microseconds within the
// histogram's range.
func clampUS(ns int64) uint32 {
	return uint32(min(max(ns/1000, histLowest), histHighest))
}

// ErrKind classifies a failed request.
type ErrKind int

// The error kinds, counted separately.
const (
	ErrRefused  ErrKind = iota // connection refused
	ErrReset                   // connection reset, broken pipe or closed mid-response
	ErrTimeout                 // no response within Config.Timeout
	ErrHTTP                    // status >= 400 (also counted per status)
	ErrProtocol                // malformed response
	ErrNoFDs                   // the generator ran out of file descriptors (EMFILE, ENFILE)
	ErrOther                   // anything else (DNS, TLS, ...)
	numErrKinds
)

var errKindNames = [numErrKinds]string{"refused", "reset", "timeout", "http", "protocol", "too-many-open-files", "other"}

// connectionFailure reports whether k is a failure to connect or to keep a
// connection (as opposed to a slow or bad answer).
func (k ErrKind) connectionFailure() bool {
	return k == ErrRefused || k == ErrReset || k == ErrNoFDs
}

// String returns the kind's name as used in reports ("refused", ...).
func (k ErrKind) String() string { return errKindNames[k] }

// classify maps a transport error to its kind.
func classify(err error) ErrKind {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return ErrRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return ErrReset
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return ErrTimeout
	case errors.Is(err, errMalformed):
		return ErrProtocol
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return ErrNoFDs
	}
	return ErrOther
}

// sample is what a shard recorded since the last tick.
type sample struct {
	corrected, uncorrected, lag *hdr.Histogram
	done                        int64
	errs                        [numErrKinds]int64
	status                      [600]int64
	// fine holds each answered request's intended time and latency when
	// the engine keeps the fine latency series (see fine.go).
	fine []finePoint
}

func newSample() *sample {
	return &sample{corrected: newHist(), uncorrected: newHist(), lag: newHist()}
}

// add merges o into s.
func (s *sample) add(o *sample) {
	if o.done > 0 || o.corrected.TotalCount() > 0 {
		s.corrected.Merge(o.corrected)
		s.uncorrected.Merge(o.uncorrected)
		s.lag.Merge(o.lag)
	}
	s.done += o.done
	for i, n := range o.errs {
		s.errs[i] += n
	}
	for i, n := range o.status {
		s.status[i] += n
	}
	s.fine = append(s.fine, o.fine...)
}

func (s *sample) reset() {
	if s.corrected.TotalCount() > 0 {
		s.corrected.Reset()
	}
	if s.uncorrected.TotalCount() > 0 {
		s.uncorrected.Reset()
	}
	if s.lag.TotalCount() > 0 {
		s.lag.Reset()
	}
	s.done = 0
	s.errs = [numErrKinds]int64{}
	s.status = [600]int64{}
	s.fine = s.fine[:0]
}

func (s *sample) errors() int64 {
	var n int64
	for _, v := range s.errs {
		n += v
	}
	return n
}

// shard is one recording lane. Workers are spread over a few shards rather
// than each owning its histograms: three 3-digit histograms cost ~140 KB
// each once reset, so per-connection histograms would take ~40 MB at 50
// connections, while a few shards per CPU keep the lock uncontended (at most
// GOMAXPROCS workers run at once).
type shard struct {
	mu  sync.Mutex
	cur *sample
	// fine: record each request's intended time and latency in the
	// sample's fine list too.
	fine bool
	_    [64]byte // keep shards on separate cache lines
}

// record adds one finished request. All times are nanoseconds on the
// engine's clock: intended send, the moment the worker was free, actual
// send, end of the response.
func (sh *shard) record(intended, ready, sent, done int64, status int, err error) {
	lag := sent - max(intended, ready)
	sh.mu.Lock()
	s := sh.cur
	s.done++
	recordUS(s.lag, lag)
	if err != nil {
		s.errs[classify(err)]++
	} else {
		recordUS(s.corrected, done-intended)
		recordUS(s.uncorrected, done-sent)
		if sh.fine {
			// The corrected latency less the generator's own lateness:
			// what the server and the wait for a free connection took.
			s.fine = append(s.fine, finePoint{at: intended, us: clampUS(done - intended - lag)})
		}
		if status >= 0 && status < len(s.status) {
			s.status[status]++
		}
		if status >= 400 {
			s.errs[ErrHTTP]++
		}
	}
	sh.mu.Unlock()
}

// swap replaces the shard's sample with fresh and returns the old one.
func (sh *shard) swap(fresh *sample) *sample {
	sh.mu.Lock()
	old := sh.cur
	sh.cur = fresh
	sh.mu.Unlock()
	return old
}
