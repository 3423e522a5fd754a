package gomem

import (
	"debug/elf"
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
