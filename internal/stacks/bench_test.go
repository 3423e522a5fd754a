package stacks

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkLoadObject measures loading a large Go binary (the compiler):
// ELF headers, symbol tables, pclntab and moduledata, then symbolizing
// 1,000 addresses spread over its text, as a first profile of it does.
func BenchmarkLoadObject(b *testing.B) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Skip("no go command")
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH, "compile")
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no compiler binary: %v", err)
	}
	b.ReportAllocs()
	var frames int
	for b.Loop() {
		f, size, ef, id, _, err := openObject(path)
		if err != nil {
			b.Fatal(err)
		}
		o := parseObject(path, f, size, ef, id)
		if o.gt == nil {
			b.Fatalf("no Go table: %v", o.goErr)
		}
		var text uint64
		for _, p := range o.loads {
			if p.Flags&1 != 0 { // PF_X
				text = p.Filesz
				for i := uint64(0); i < 1000; i++ {
					fr, _ := o.symbolize(p.Vaddr+i*(text/1000), nil)
					frames += len(fr)
				}
			}
		}
		f.Close()
	}
	if frames == 0 {
		b.Fatal("no frames")
	}
}
