package syscalls

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// tracepointProgram owns one set of BPF objects: the maps a program uses,
// the program and the link that attaches it to a tracepoint, the way
// cilium/ebpf's Collection owns its maps and programs. Close releases them
// once, the link first, so the program stops running before its maps go;
// a set half built is released by the same Close.
type tracepointProgram struct {
	maps []*ebpf.Map
	prog *ebpf.Program
	link link.Link
}

// newMap creates a map owned by t.
func (t *tracepointProgram) newMap(spec *ebpf.MapSpec) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("create map: %w", wrapBPF(err))
	}
	t.maps = append(t.maps, m)
	return m, nil
}

// attach loads insns as a tracepoint program and attaches it to
// group:name.
func (t *tracepointProgram) attach(group, name string, insns asm.Instructions) error {
	if _, err := perf.TracefsRoot(); err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint, License: "GPL", Instructions: insns})
	if err != nil {
		return fmt.Errorf("load program: %w", wrapBPF(err))
	}
	t.prog = prog
	t.link, err = link.Tracepoint(group, name, prog, nil)
	if err != nil {
		return fmt.Errorf("attach to %s:%s: %w", group, name, wrapBPF(err))
	}
	return nil
}

// Close detaches the program and frees it and the maps.
func (t *tracepointProgram) Close() error {
	var errs []error
	if t.link != nil {
		errs = append(errs, t.link.Close())
	}
	if t.prog != nil {
		errs = append(errs, t.prog.Close())
	}
	for _, m := range t.maps {
		errs = append(errs, m.Close())
	}
	t.link, t.prog, t.maps = nil, nil, nil
	return errors.Join(errs...)
}

func wrapBPF(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w: %w", proc.ErrNotSupported, err)
	}
	return err
}
