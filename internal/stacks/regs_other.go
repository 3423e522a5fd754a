//go:build !amd64

package stacks

// userRegsMask is 0 where the leaf fix-up is not implemented: samples then
// carry no user registers or stack.
const userRegsMask = 0

func userIP([]byte) uint64 { return 0 }
