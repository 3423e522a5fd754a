// Command booksnoprof is a patient without the heap profile (nothing in it
// references it, so the linker turns memory profiling off): a relay that
// holds 5,000 connections, each read by one goroutine and written by
// another, both parked. Its goroutines' memory is judged from their stacks
// alone. It prints "ready" and runs until killed.
package main

import (
	"fmt"
	"log"
	"net"
	"sync/atomic"
	"time"
)

type relay struct {
	c    net.Conn
	msgs chan []byte
}

var started atomic.Int64

func (r *relay) read() {
	buf := make([]byte, 16<<10)
	started.Add(1)
	for {
		n, err := r.c.Read(buf)
		if err != nil {
			close(r.msgs)
			return
		}
		r.msgs <- append([]byte(nil), buf[:n]...)
	}
}

func (r *relay) write() {
	started.Add(1)
	for m := range r.msgs {
		r.c.Write(m)
	}
}

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := &relay{c: c, msgs: make(chan []byte, 4)}
			go r.read()
			go r.write()
		}
	}()
	const conns = 5000
	var held []net.Conn
	for range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, c)
	}
	for started.Load() < 2*conns {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("ready")
	for i := 0; ; i++ {
		time.Sleep(10 * time.Millisecond)
		held[i%len(held)].Write([]byte("ping\n"))
	}
}
