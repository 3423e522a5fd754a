//go:build !linux

package stacks

import "context"

// Sample fails: stack sampling needs Linux perf events.
func Sample(context.Context, Options) (*Raw, error) { return nil, ErrNotSupported }
