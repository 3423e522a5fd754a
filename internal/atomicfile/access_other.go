//go:build !unix

package atomicfile

func accessW(string) error { return nil }
