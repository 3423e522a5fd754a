//go:build linux

package stacks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/gosleuth/gosleuth/internal/perf"
	"golang.org/x/sys/unix"
)

// offCPU records where threads block: a sched:sched_switch tracepoint
// event per thread samples the stack at every Nth switch-out, and the same
// event's context-switch records give the time the thread ran again.
type offCPU struct {
	id    uint64
	every int
	rings map[int]*perf.Ring
	agg   map[string]*Stack
	outs  []switchOut
	ins   map[int][]uint64 // switch-in times by thread
	lost  int64
}

type switchOut struct {
	st  *Stack
	tid int
	at  uint64
}

// offRingPages sizes each thread's off-CPU ring: 128 KiB holds about 100
// ms of a thread switching 1,500 times a second.
const offRingPages = 32

func (s *sampler) initOffCPU() error {
	id, err := perf.TracepointID("sched", "sched_switch")
	if err != nil {
		return fmt.Errorf("off-CPU sampling: %w", err)
	}
	every := s.opts.OffCPUEvery
	if every < 1 {
		every = 1
	}
	s.off = &offCPU{id: id, every: every, rings: map[int]*perf.Ring{}, agg: map[string]*Stack{}, ins: map[int][]uint64{}}
	return nil
}

func (s *sampler) offAttr() unix.PerfEventAttr {
	a := s.attr()
	a.Type = unix.PERF_TYPE_TRACEPOINT
	a.Config = s.off.id
	a.Sample = uint64(s.off.every)
	a.Bits |= unix.PerfBitSampleIDAll | unix.PerfBitContextSwitch
	return a
}

func (s *sampler) openOff(tid int) error {
	attr := s.offAttr()
	r, err := perf.OpenRing(&attr, tid, offRingPages)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("off-CPU sampling of thread %d: %w", tid, err)
	}
	if err := r.Enable(); err != nil {
		r.Close()
		return fmt.Errorf("off-CPU sampling of thread %d: %w", tid, err)
	}
	s.off.rings[tid] = r
	return nil
}

func (s *sampler) closeOff(tid int) {
	if s.off == nil {
		return
	}
	if r := s.off.rings[tid]; r != nil {
		s.readOff(r)
		s.off.lost += int64(r.Lost())
		r.Close()
		delete(s.off.rings, tid)
	}
}

func (s *sampler) readOff(r *perf.Ring) {
	r.Read(func(typ uint32, misc uint16, body []byte) {
		switch typ {
		case unix.PERF_RECORD_SAMPLE:
			tid, when, fixed, ok := s.parseSample(body)
			if !ok {
				return
			}
			st := s.add(s.off.agg, tid, ModeKernel, fixed)
			s.off.outs = append(s.off.outs, switchOut{st, tid, when})
		case unix.PERF_RECORD_SWITCH:
			if misc&unix.PERF_RECORD_MISC_SWITCH_OUT != 0 || len(body) < 16 {
				return
			}
			tid := int(binary.NativeEndian.Uint32(body[4:]))
			s.off.ins[tid] = append(s.off.ins[tid], binary.NativeEndian.Uint64(body[8:]))
		}
	})
}

// finishOff weighs each recorded switch-out by the time until the thread
// ran again (times the sampling interval) and moves the stacks to raw.
func (s *sampler) finishOff() {
	o := s.off
	for _, r := range o.rings {
		o.lost += int64(r.Lost())
	}
	for _, in := range o.ins {
		sort.Slice(in, func(i, j int) bool { return in[i] < in[j] })
	}
	for _, so := range o.outs {
		in := o.ins[so.tid]
		i := sort.Search(len(in), func(i int) bool { return in[i] > so.at })
		if i == len(in) {
			continue // still off CPU at the end: its duration is unknown
		}
		so.st.Count += int64(o.every)
		so.st.OffNS += int64(in[i]-so.at) * int64(o.every)
	}
	for _, st := range o.agg {
		if st.Count > 0 {
			st.OffCPU = true
			s.raw.OffCPU = append(s.raw.OffCPU, st)
		}
	}
	s.raw.OffCPUEvery = o.every
	s.raw.OffCPUAll = s.opts.OffCPUAll
	s.raw.OffCPULost = o.lost
	s.raw.OffCPUSwitches = int64(len(o.outs))
}
