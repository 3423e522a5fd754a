// Package wire holds what the gosleuth agent (package agent, linked into a
// user's program) and gosleuth's reader (package goruntime) must agree on:
// where the agent's socket lives, the HTTP paths it serves and the text
// encoding of a runtime/metrics reading. It depends on the standard library
// only, so the agent stays small.
//
// # Metrics encoding
//
// A metrics reply is UTF-8 text, one item per line, fields separated by one
// space:
//
//	gosleuth-metrics 1
//	pid 1234
//	time 1763800000000000000        (Unix nanoseconds, when the read finished)
//	go go1.26.8
//	u /gc/cycles/total:gc-cycles 12
//	f /cpu/classes/gc/total:cpu-seconds 0.25
//	h /sched/latencies:seconds N b0 .. bN-1 c0 .. cN-2
//	x /some/metric:unit             (a kind this encoder does not know)
//
// A histogram line gives N bucket boundaries, then N-1 counts; boundaries
// may be -Inf and +Inf.
package wire

import (
	"fmt"
	"path/filepath"
	"runtime/metrics"
	"strconv"
)

// HTTP paths served by the agent. The profile paths are those of
// net/http/pprof, so a reader of one reads the other.
const (
	PathInfo    = "/gosleuth/v1/info"
	PathMetrics = "/gosleuth/v1/metrics"
	PathTrace   = "/gosleuth/v1/trace"
	PathPprof   = "/debug/pprof/"
)

// Magic is the first line of a metrics reply.
const Magic = "gosleuth-metrics 1"

// SocketDir returns the per-user directory holding agent sockets:
// $XDG_RUNTIME_DIR/gosleuth when xdgRuntimeDir is set, /tmp/gosleuth-UID
// otherwise.
func SocketDir(uid int, xdgRuntimeDir string) string {
	if xdgRuntimeDir != "" && filepath.IsAbs(xdgRuntimeDir) {
		return filepath.Join(xdgRuntimeDir, "gosleuth")
	}
	return filepath.Join("/tmp", "gosleuth-"+strconv.Itoa(uid))
}

// FallbackPattern is the os.MkdirTemp pattern of the private directory an
// agent makes when SocketDir is unusable (another user created
// /tmp/gosleuth-UID first, say): its name cannot be guessed ahead, so it
// cannot be squatted. FallbackGlob finds such directories.
func FallbackPattern(uid int) string { return "gosleuth-" + strconv.Itoa(uid) + ".*" }

// FallbackGlob is the filepath.Glob pattern of uid's fallback directories.
func FallbackGlob(uid int) string { return filepath.Join("/tmp", FallbackPattern(uid)) }

// SocketName returns the file name of the socket of the agent in process
// pid (as the process sees its own PID).
func SocketName(pid int) string { return strconv.Itoa(pid) + ".sock" }

// Encoder encodes metrics readings. Histogram bucket boundaries never
// change within a process, so their text is kept after the first reading
// and only the counts are formatted again: formatting the boundaries of
// the histograms (about 1,100 floats in Go 1.26) would otherwise dominate a
// read. An Encoder is not safe for concurrent use.
type Encoder struct {
	buckets map[string][]byte
}

// AppendMetrics appends the encoding of samples, read by metrics.Read, to
// buf. Header lines (pid, time, go) are the caller's.
func (e *Encoder) AppendMetrics(buf []byte, samples []metrics.Sample) []byte {
	if e.buckets == nil {
		e.buckets = make(map[string][]byte)
	}
	for i := range samples {
		s := &samples[i]
		switch s.Value.Kind() {
		case metrics.KindUint64:
			buf = append(buf, "u "...)
			buf = append(buf, s.Name...)
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, s.Value.Uint64(), 10)
		case metrics.KindFloat64:
			buf = append(buf, "f "...)
			buf = append(buf, s.Name...)
			buf = append(buf, ' ')
			buf = strconv.AppendFloat(buf, s.Value.Float64(), 'g', -1, 64)
		case metrics.KindFloat64Histogram:
			h := s.Value.Float64Histogram()
			buf = append(buf, "h "...)
			buf = append(buf, s.Name...)
			bt, ok := e.buckets[s.Name]
			if !ok || !sameCount(bt, len(h.Buckets)) {
				bt = strconv.AppendInt(nil, int64(len(h.Buckets)), 10)
				for _, b := range h.Buckets {
					bt = append(bt, ' ')
					bt = strconv.AppendFloat(bt, b, 'g', -1, 64)
				}
				e.buckets[s.Name] = bt
			}
			buf = append(buf, ' ')
			buf = append(buf, bt...)
			for _, c := range h.Counts {
				if c == 0 {
					buf = append(buf, " 0"...)
					continue
				}
				buf = append(buf, ' ')
				buf = strconv.AppendUint(buf, c, 10)
			}
		default:
			buf = append(buf, "x "...)
			buf = append(buf, s.Name...)
		}
		buf = append(buf, '\n')
	}
	return buf
}

// sameCount reports whether cached bucket text starts with the count n.
func sameCount(bt []byte, n int) bool {
	var tmp [20]byte
	c := strconv.AppendInt(tmp[:0], int64(n), 10)
	return len(bt) > len(c) && string(bt[:len(c)]) == string(c) && bt[len(c)] == ' '
}

// AppendHeader appends the header lines of a metrics reply.
func AppendHeader(buf []byte, pid int, unixNano int64, goVersion string) []byte {
	return fmt.Appendf(buf, "%s\npid %d\ntime %d\ngo %s\n", Magic, pid, unixNano, goVersion)
}
