//go:build !linux

package main

import "time"

// pingProbe is Linux's only.
type pingProbe struct{}

func startPing() *pingProbe                        { return nil }
func (p *pingProbe) mean(t0, t1 time.Time) float64 { return 0 }
func (p *pingProbe) close()                        {}
