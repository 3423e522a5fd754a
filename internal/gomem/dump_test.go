package gomem

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"github.com/gosleuth/gosleuth/internal/proc"
	"os"
	"sort"
	"testing"
)

func TestDumpLayout(t *testing.T) {
	p := os.Getenv("GOMEM_DUMP")
	if p == "" {
		t.Skip("set GOMEM_DUMP")
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	l, err := layoutFromDWARF(d)
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for k := range l.Offsets {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		t.Logf("%s %d", k, l.Offsets[k])
	}
	t.Logf("%v", l.Sizes)
}

func TestDumpCensus(t *testing.T) {
	pid := os.Getenv("GOMEM_PID")
	if pid == "" {
		t.Skip("set GOMEM_PID")
	}
	var n int
	fmt.Sscan(pid, &n)
	p, err := Open(proc.FS{}, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s %s", p.GoVersion, p.Layout.From, p.Located)
	c, err := p.Census(CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(c.ByState, "", " ")
	t.Logf("%s", b)
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.MarshalIndent(st, "", " ")
	t.Logf("%s", b)
	h, err := p.HeapProfile()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range h.Records {
		t.Logf("%v %d %d %d %d", p.symbolize(r.Stack[:min(3, len(r.Stack))]), r.AllocObjects, r.AllocBytes, r.InUseObjects(), r.InUseBytes())
	}
}
