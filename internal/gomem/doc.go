// Package gomem reads the Go runtime's own books from another process's
// memory: its goroutines, its heap profile, its GC and memory statistics,
// its scheduler and its timers, with no agent, no ptrace stop and no write.
//
// # How
//
// [Open] finds the target's runtime variables (runtime.allgs, runtime.mbuckets,
// runtime.memstats, ...) in its executable's symbol table, or, in a stripped
// binary, through the code of small runtime functions that load them (their
// names stay in the Go function table). It takes the layout of the runtime's
// structures from the binary's DWARF where it has it, else from the tables in
// layouts_gen.go, generated from real toolchains of every Go release from 1.20
// on; an unknown release is refused, never guessed. Memory is read with
// process_vm_readv, which needs the same access as ptrace attach (root, or the
// same user where Yama allows it) but never stops the target: the reads are
// snapshots of structures the runtime updates without any lock a reader could
// take.
//
// # Safety
//
// The target is hostile input. Every address is checked against the target's
// mappings before it is read, every walk is bounded in count and bytes, list
// walks detect cycles, and every count read from memory is capped before it
// sizes anything. A torn or scribbled read gives a wrong or partial answer
// with an error or a note, never a crash, a hang or unbounded memory in
// gosleuth.
package gomem
