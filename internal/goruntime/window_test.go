package goruntime_test

import (
	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/window"
)

func init() { goruntime.SetBetween(window.RuntimeBetween) }
