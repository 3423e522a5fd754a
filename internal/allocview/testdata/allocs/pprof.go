//go:build !noprof

package main

import (
	"net"
	"net/http"
	_ "net/http/pprof"
	"runtime"
)

// start samples one allocation per 4 KiB (as tests of heap profiles
// do, for counts precise enough to compare), serves net/http/pprof on a
// loopback port and returns its address.
func start() string {
	runtime.MemProfileRate = 4096
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go http.Serve(l, nil)
	return l.Addr().String()
}
