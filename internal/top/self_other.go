//go:build !unix

package top

import "time"

type selfUsage struct {
	user, sys time.Duration
	rss       uint64
}

func readSelfUsage() selfUsage { return selfUsage{} }
