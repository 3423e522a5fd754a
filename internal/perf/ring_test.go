//go:build linux

package perf

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"golang.org/x/sys/unix"
)

// putRecord writes one record (header + body) into ring data at byte
// counter pos, wrapping, and returns the new position.
func putRecord(data []byte, pos uint64, typ uint32, body []byte) uint64 {
	rec := make([]byte, recordHeaderSize+len(body))
	binary.NativeEndian.PutUint32(rec[0:], typ)
	binary.NativeEndian.PutUint16(rec[6:], uint16(len(rec)))
	copy(rec[recordHeaderSize:], body)
	mask := uint64(len(data) - 1)
	for i, b := range rec {
		data[(pos+uint64(i))&mask] = b
	}
	return pos + uint64(len(rec))
}

func TestRingReadWrapsAndCountsLost(t *testing.T) {
	var meta unix.PerfEventMmapPage
	data := make([]byte, 64)
	r := &Ring{fd: -1, meta: &meta, data: data}

	// Start near the end so the second record straddles the boundary, and
	// let the counters run past one lap.
	start := uint64(64*3 + 40)
	pos := putRecord(data, start, unix.PERF_RECORD_SAMPLE, []byte("abcdefgh"))
	lost := make([]byte, 16)
	binary.NativeEndian.PutUint64(lost[8:], 7)
	pos = putRecord(data, pos, unix.PERF_RECORD_LOST, lost)
	pos = putRecord(data, pos, unix.PERF_RECORD_SAMPLE, []byte("ijklmnop"))
	meta.Data_tail = start
	meta.Data_head = pos

	type rec struct {
		typ  uint32
		body string
	}
	var got []rec
	n := r.Read(func(typ uint32, _ uint16, body []byte) {
		got = append(got, rec{typ, string(body)})
	})
	want := []rec{
		{unix.PERF_RECORD_SAMPLE, "abcdefgh"},
		{unix.PERF_RECORD_LOST, string(lost)},
		{unix.PERF_RECORD_SAMPLE, "ijklmnop"},
	}
	if n != len(want) || len(got) != len(want) {
		t.Fatalf("read %d records %v, want %d", n, got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d = %v, want %v", i, got[i], want[i])
		}
	}
	if r.Lost() != 7 {
		t.Errorf("lost %d, want 7", r.Lost())
	}
	if meta.Data_tail != pos {
		t.Errorf("data_tail %d, want %d (consumed up to head)", meta.Data_tail, pos)
	}
	if n := r.Read(func(uint32, uint16, []byte) { t.Error("record read twice") }); n != 0 {
		t.Errorf("second read got %d records", n)
	}
}

func TestReadRecordsStopsOnCorruptHeader(t *testing.T) {
	data := make([]byte, 32) // all zero: a header of size 0
	tail, n, _ := readRecords(data, 24, 0, nil, func(uint32, uint16, []byte) { t.Error("record from garbage") })
	if n != 0 || tail != 24 {
		t.Errorf("n %d tail %d, want 0 and 24", n, tail)
	}
}

// TestRingSamplesOwnThread samples this test's own thread with cpu-clock
// while it spins and checks the samples carry its thread ID.
func TestRingSamplesOwnThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_CPU_CLOCK,
		Sample:      1000, // Hz
		Sample_type: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID,
		Bits:        unix.PerfBitDisabled | unix.PerfBitFreq | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
		Wakeup:      1,
	}
	r, err := OpenRing(&attr, tid, 4)
	if errors.Is(err, ErrPermission) {
		testenv.Missing(t, testenv.Perf, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Enable(); err != nil {
		t.Fatal(err)
	}
	var samples, others int
	deadline := time.Now().Add(5 * time.Second)
	x := 1
	for samples < 20 && time.Now().Before(deadline) {
		for i := 0; i < 1e6; i++ {
			x = x*31 + i
		}
		r.Read(func(typ uint32, _ uint16, body []byte) {
			if typ != unix.PERF_RECORD_SAMPLE {
				return
			}
			if len(body) < 16 {
				t.Fatalf("sample of %d bytes", len(body))
			}
			if int(binary.NativeEndian.Uint32(body[12:])) == tid {
				samples++
			} else {
				others++
			}
		})
	}
	if samples < 20 || others != 0 {
		t.Errorf("%d samples of thread %d, %d of others (x=%d)", samples, tid, others, x)
	}
	if ok, err := r.Wait(0); err != nil {
		t.Errorf("wait: %v (ready %v)", err, ok)
	}
	r.Disable()
	if r.Records() == 0 {
		t.Error("Records() is 0")
	}
}
