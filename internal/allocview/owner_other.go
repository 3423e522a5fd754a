//go:build !linux

package allocview

import "github.com/gosleuth/gosleuth/internal/proc"

// checkOwner checks nothing outside Linux, where there is no process to
// read.
func checkOwner(pfs proc.FS, pid int, root string) error { return nil }
