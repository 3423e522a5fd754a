package window

import "golang.org/x/sys/unix"

func syscallGettid() int { return unix.Gettid() }
