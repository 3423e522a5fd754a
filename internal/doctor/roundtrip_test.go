package doctor

import (
	"fmt"
	"strings"
	"testing"
)

// TestRoundTrip: a value encoded and decoded straight back in one
// function is a copy through a serialization (a warning, both calls
// named); a handler that decodes its request and then encodes its reply
// is not.
func TestRoundTrip(t *testing.T) {
	host := &Host{CPUs: 2}
	call := func(callee, caller string, line int, share float64) LibCall {
		return LibCall{Callee: callee, Caller: Site{Func: caller, File: "/src/main.go", Line: line}, Share: share}
	}
	stacks := func(calls ...LibCall) *Window {
		return win(10, func(w *Window) {
			w.UserSec = 1.5
			w.Stacks = &Stacks{Samples: 400, Classes: map[string]float64{ClassUserCode: 0.7}, LibCalls: calls}
		})
	}
	tests := []struct {
		name string
		w    *Window
		want Severity
		code string // the first code reference's function and line
	}{
		{"json deep copy", stacks(call("encoding/json.Unmarshal", "main.snapshot", 38, 0.45), call("encoding/json.Marshal", "main.snapshot", 36, 0.2)),
			Warn, "main.snapshot:36"},
		{"gob deep copy", stacks(call("encoding/gob.(*Decoder).Decode", "main.clone", 21, 0.2), call("encoding/gob.(*Encoder).Encode", "main.clone", 19, 0.15)),
			Warn, "main.clone:19"},
		{"a handler decodes its request, then encodes its reply: needed work, information", stacks(call("encoding/json.Unmarshal", "main.handle", 20, 0.3), call("encoding/json.Marshal", "main.handle", 31, 0.2)),
			Info, "main.handle:20"},
		{"encode and decode in different functions", stacks(call("encoding/json.Marshal", "main.save", 10, 0.2), call("encoding/json.Unmarshal", "main.load", 12, 0.2)),
			-1, ""},
		{"a copy too light to matter", stacks(call("encoding/json.Marshal", "main.snapshot", 36, 0.05), call("encoding/json.Unmarshal", "main.snapshot", 38, 0.05)),
			-1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := ruleSeverity(t, tt.w, host, "cpu-hotspot", tt.want)
			if f == nil || tt.code == "" {
				return
			}
			got := fmt.Sprintf("%s:%d", f.Code[0].Func, f.Code[0].Line)
			if got != tt.code {
				t.Errorf("code %s, want %s", got, tt.code)
			}
			if tt.want == Warn && (len(f.Code) != 2 || !strings.Contains(f.Title, "copied")) {
				t.Errorf("%q names %v: want the copy and both calls", f.Title, f.Code)
			}
		})
	}
}
