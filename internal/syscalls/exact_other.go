//go:build !linux

package syscalls

// Exact counts a process's syscalls by name; it needs Linux.
type Exact struct{}

// CountExact returns ErrNotSupported: counting syscalls needs Linux.
func CountExact(pid int, opts ExactOptions) (*Exact, error) { return nil, ErrNotSupported }

// ExactAvailable returns ErrNotSupported: counting syscalls needs Linux.
func ExactAvailable() error { return ErrNotSupported }

// BPFWorks reports false: BPF needs Linux.
func BPFWorks() bool { return false }

// Read returns ErrNotSupported.
func (e *Exact) Read() (Reading, error) { return Reading{}, ErrNotSupported }

// Mechanism returns Tracepoints.
func (e *Exact) Mechanism() Mechanism { return Tracepoints }

// Describe says how the counter counts.
func (e *Exact) Describe() string { return "" }

// Names are the syscalls counted by name.
func (e *Exact) Names() []string { return nil }

// Close does nothing.
func (e *Exact) Close() error { return nil }
