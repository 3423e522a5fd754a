//go:build !linux

package goruntime

import (
	"io/fs"
	"net"
)

// peerPID is not available outside Linux.
func peerPID(net.Conn) (int, bool) { return 0, false }

func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
