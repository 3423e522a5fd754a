package stacks

import "testing"

// TestObjectCacheNotByBuildID: two different binaries claiming the same
// build ID each get their own symbols. The cache was keyed by build ID
// alone, so the second binary's samples got the first one's names
// (research defect 11; a build ID is whatever the builder wrote).
func TestObjectCacheNotByBuildID(t *testing.T) {
	a := buildPatient(t, "getppid", "-ldflags=-buildid=gosleuth-same-id")
	b := buildPatient(t, "sleeper", "-ldflags=-buildid=gosleuth-same-id")
	oa, err := loadObject(a)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := loadObject(b)
	if err != nil {
		t.Fatal(err)
	}
	// The linker derives the GNU build ID from the Go one, so both carry
	// the same GNU build ID too.
	if oa.buildID != ob.buildID || oa.buildID == "" {
		t.Fatalf("build IDs %q and %q: want the same one", oa.buildID, ob.buildID)
	}
	if oa == ob {
		t.Fatal("the second binary got the first one's object")
	}
	// Each object resolves main.main to its own file's line: getppid's
	// main.go and sleeper's main.go have main at different lines.
	want := map[*object]int{oa: 7, ob: 18}
	for o, line := range want {
		addr := o.symbolAddr("main.main")
		frames, ok := o.symbolize(addr, nil)
		if addr == 0 || !ok || len(frames) == 0 {
			t.Fatalf("%s: main.main not resolved (addr %#x)", o.path, addr)
		}
		f := frames[len(frames)-1]
		if f.Func != "main.main" || f.Line != line {
			t.Errorf("%s: main.main's entry resolves to %s line %d, want line %d", o.path, f.Func, f.Line, line)
		}
	}
	// Loading again returns the cached object for the same file.
	if again, _ := loadObject(a); again != oa {
		t.Error("the same file loaded twice gave two objects")
	}
}
