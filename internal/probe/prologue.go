package probe

// Kind says how the kernel handles a probe point.
type Kind int

// Probe point kinds.
const (
	// Emulated: the probe sits on a PUSHQ BP, which the kernel emulates
	// (about 0.8 µs a hit here).
	Emulated Kind = iota
	// SingleStepped: any other instruction, executed out of line (about
	// 10 µs a hit here); the callchain lacks the direct caller.
	SingleStepped
)

func (k Kind) String() string {
	if k == Emulated {
		return "emulated"
	}
	return "single-stepped"
}

// Cost is the assumed target CPU per hit of a probe of kind k, in
// nanoseconds (measured on this project's VM kind; docs/probe.md, Cost).
func (k Kind) Cost() float64 {
	if k == Emulated {
		return 900
	}
	return 10_000
}

// ProbePoint finds where to probe a Go amd64 function whose code starts
// with code: after the stack-bound check (CMPQ SP,16(R14), or LEAQ
// -n(SP),R12 + CMPQ R12,16(R14) for large frames, then a JBE) on the PUSHQ
// BP, or at a NOSPLIT function's own PUSHQ BP. Anything else is probed at
// the entry and single-stepped. The code comes from the target's binary,
// so every index is checked.
func ProbePoint(code []byte) (off int, kind Kind) {
	at := func(i int, b ...byte) bool {
		if i < 0 || i+len(b) > len(code) {
			return false
		}
		for j, c := range b {
			if code[i+j] != c {
				return false
			}
		}
		return true
	}
	if at(0, 0x55) {
		return 0, Emulated
	}
	i := -1
	switch {
	case at(0, 0x49, 0x3b, 0x66, 0x10): // CMPQ SP, 16(R14)
		i = 4
	case at(0, 0x4c, 0x8d, 0x64, 0x24) && at(5, 0x4d, 0x3b, 0x66, 0x10): // LEAQ -n(SP), R12 (disp8)
		i = 9
	case at(0, 0x4c, 0x8d, 0xa4, 0x24) && at(8, 0x4d, 0x3b, 0x66, 0x10): // LEAQ -n(SP), R12 (disp32)
		i = 12
	default:
		return 0, SingleStepped
	}
	switch {
	case at(i, 0x76): // JBE rel8
		i += 2
	case at(i, 0x0f, 0x86): // JBE rel32
		i += 6
	default:
		return 0, SingleStepped
	}
	if at(i, 0x55) {
		return i, Emulated
	}
	return 0, SingleStepped
}
