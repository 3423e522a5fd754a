package stacks

import "encoding/binary"

// userRegsMask asks perf for the user BP, SP and IP registers
// (PERF_REG_X86_BP=6, SP=7, IP=8), delivered in that order.
const userRegsMask = 1<<6 | 1<<7 | 1<<8

// userIP returns the user IP from the registers of a sample; the stack
// copy that follows them starts at the user SP.
func userIP(regs []byte) uint64 { return binary.NativeEndian.Uint64(regs[16:]) }
