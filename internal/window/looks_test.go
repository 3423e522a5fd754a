package window

import "testing"

func TestFuncPkg(t *testing.T) {
	for fn, want := range map[string]string{
		"encoding/json.(*decodeState).object": "encoding/json",
		"main.main.func1":                     "main",
		"runtime.AddCleanup[go.shape.struct { Pid int; os.state sync/atomic.Uint32 }]": "runtime",
		"github.com/a/b.F":  "github.com/a/b",
		"[kernel.kallsyms]": "",
	} {
		if got := funcPkg(fn); got != want {
			t.Errorf("funcPkg(%q) = %q, want %q", fn, got, want)
		}
	}
}
