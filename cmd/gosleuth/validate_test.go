package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestUsageLimits: values that parse but make no sense (research defect
// 17: a malformed endpoint URL accepted as a note, an 11-year window, a
// negative list length, a syscall list of commas) are usage errors before
// any work starts, from every command that takes them.
func TestUsageLimits(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--pid", "1", "--pprof-url", "ht!tp://::::"}, `pprof URL "ht!tp://::::"`},
		{[]string{"doctor", "--pid", "1", "--metrics-url", "ftp://host/metrics"}, `metrics URL "ftp://host/metrics"`},
		{[]string{"inspect", "--pid", "1", "--pprof-url", "http://"}, `pprof URL "http://"`},
		{[]string{"inspect", "--pid", "1", "--duration", "100000h"}, "at most 1h"},
		{[]string{"syscalls", "--pid", "1", "--duration", "100000h"}, "at most 24h"},
		{[]string{"syscalls", "--pid", "1", "--only", ",,,"}, "names no syscall"},
		{[]string{"profile", "--pid", "1", "--duration", "48h"}, "at most 24h"},
		{[]string{"profile", "--pid", "1", "--top", "-5"}, "--top must be at least 1"},
		{[]string{"profile", "--pid", "1", "--top", "0"}, "--top must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := run(context.Background(), tt.args, io.Discard, io.Discard)
			var u usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want a usage error with %q", err, tt.want)
			}
		})
	}
}
