//go:build linux

package goruntime

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// startMaxprocs runs the maxprocs patient built with flags, setting
// GOMAXPROCS to set in its code, and returns its PID once it is ready.
func startMaxprocs(t *testing.T, flags []string, env []string, set int) int {
	t.Helper()
	bin := testbin.BuildWith(t, "./testdata/maxprocs", flags...)
	cmd := exec.Command(bin, strconv.Itoa(set))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	// Its input stays open while the test runs: it exits when that closes.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, cmd, testbin.Options{})
	if line := p.Ready(); !strings.HasPrefix(line, "ready ") {
		t.Fatalf("patient did not start: %q", line)
	}
	return p.PID()
}

// TestGOMAXPROCSFromMemory: a program that calls runtime.GOMAXPROCS(7)
// runs with 7 whatever its CPUs, and the facts say so, read from its memory
// by symbol, in a PIE, and in a stripped build through the code of
// runtime.GOMAXPROCS; the value in memory beats the environment's.
func TestGOMAXPROCSFromMemory(t *testing.T) {
	testenv.Require(t, testenv.Root)
	codePath := "located through the code of runtime.GOMAXPROCS"
	tests := []struct {
		name  string
		flags []string
		env   []string
		set   int
		from  string // in GOMAXPROCSFrom
	}{
		{"symbol", nil, nil, 7, "(runtime.gomaxprocs)"},
		{"pie", []string{"-buildmode=pie"}, nil, 7, "(runtime.gomaxprocs)"},
		{"stripped", []string{"-ldflags=-s -w"}, nil, 7, codePath},
		{"stripped pie", []string{"-buildmode=pie", "-ldflags=-s -w"}, nil, 7, codePath},
		{"memory beats environment", nil, []string{"GOMAXPROCS=3"}, 5, "the environment says GOMAXPROCS=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := startMaxprocs(t, tt.flags, tt.env, tt.set)
			f, err := Discover("", pid)
			if err != nil {
				t.Fatal(err)
			}
			stripped := slices.Contains(tt.flags, "-ldflags=-s -w")
			if stripped && runtime.GOARCH != "amd64" {
				// The code is decoded on amd64 only: the documented fallback.
				if !strings.Contains(f.GOMAXPROCSFrom, "not read from memory") {
					t.Errorf("GOMAXPROCSFrom %q: want the reason it was not read", f.GOMAXPROCSFrom)
				}
				return
			}
			if f.GOMAXPROCS != tt.set || !strings.Contains(f.GOMAXPROCSFrom, "read from the process's memory") ||
				!strings.Contains(f.GOMAXPROCSFrom, tt.from) {
				t.Errorf("GOMAXPROCS %d (%s), want %d read from memory (%s); notes %q",
					f.GOMAXPROCS, f.GOMAXPROCSFrom, tt.set, tt.from, f.Notes)
			}
		})
	}
}

// TestGOMAXPROCSCodePathMatchesSymbol: in binaries that have both, the
// address decoded from runtime.GOMAXPROCS's code is the symbol's (plain,
// PIE, race, and the Go that built node exporter when it is installed:
// its stripped address is checked live by TestGOMAXPROCSNodeExporter).
func TestGOMAXPROCSCodePathMatchesSymbol(t *testing.T) {
	// The code of runtime.GOMAXPROCS is decoded on amd64 only.
	testenv.Require(t, testenv.AMD64)
	builds := [][]string{nil, {"-buildmode=pie"}}
	if testenv.Has(testenv.GCC) {
		builds = append(builds, []string{"-race"})
	}
	for _, flags := range builds {
		bin := testbin.BuildWith(t, "./testdata/maxprocs", flags...)
		im, err := stacks.OpenImage(bin)
		if err != nil {
			t.Fatal(err)
		}
		sym, err := im.Symbol("runtime.gomaxprocs")
		code := gomaxprocsFromCode(im)
		im.Close()
		if err != nil || code.err != nil || code.addr != sym {
			t.Errorf("%v: symbol %#x (%v), code %#x (%v)", flags, sym, err, code.addr, code.err)
		}
	}
}

// TestGOMAXPROCSNodeExporter reads a real stripped binary of Go 1.19:
// node exporter sets GOMAXPROCS in its code from its --runtime.gomaxprocs
// flag (default 1), which takes the environment's GOMAXPROCS.
func TestGOMAXPROCSNodeExporter(t *testing.T) {
	// The code of runtime.GOMAXPROCS is decoded on amd64 only.
	testenv.Require(t, testenv.Root, testenv.NodeExporter, testenv.AMD64)
	cmd := exec.Command("prometheus-node-exporter", "--web.listen-address=127.0.0.1:0",
		"--runtime.gomaxprocs=3", "--collector.disable-defaults")
	// It logs "Listening on" once main has run past runtime.GOMAXPROCS.
	testbin.Start(t, cmd, testbin.Options{Stderr: true, Ready: func(l string) bool { return strings.Contains(l, "Listening on") }})
	f, err := Discover("", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if f.GOMAXPROCS != 3 || !strings.Contains(f.GOMAXPROCSFrom, "located through the code") {
		t.Errorf("GOMAXPROCS %d (%s), want 3 read from memory through the code; notes %q", f.GOMAXPROCS, f.GOMAXPROCSFrom, f.Notes)
	}
}

// TestGOMAXPROCSMemoryFallback: where memory cannot be read (no mem file,
// as without ptrace access) or holds no plausible value (0, before the
// runtime's start), the computed value stays with one note; a value at the
// variable's address is taken. The process is a fixture tree whose exe is
// the patient (not PIE) and whose mem is a sparse file.
func TestGOMAXPROCSMemoryFallback(t *testing.T) {
	bin := testbin.BuildWith(t, "./testdata/maxprocs")
	im, err := stacks.OpenImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := im.Symbol("runtime.gomaxprocs")
	im.Close()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		mem   int32 // -1: no mem file
		want  int
		notes int
	}{
		{"no mem", -1, 2, 1},
		{"zero", 0, 2, 1},
		{"implausible", 1<<20 + 1, 2, 1},
		{"negative", -5, 2, 1},
		{"read", 12, 12, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "42")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(bin, filepath.Join(dir, "exe")); err != nil {
				t.Fatal(err)
			}
			if tt.mem != -1 {
				writeMem(t, filepath.Join(dir, "mem"), addr, tt.mem)
			}
			f := &Facts{IsGo: true, Exe: bin, GOMAXPROCS: 2, GOMAXPROCSFrom: "computed"}
			f.readGOMAXPROCS(proc.NewFS(root), 42)
			if f.GOMAXPROCS != tt.want || len(f.Notes) != tt.notes {
				t.Errorf("GOMAXPROCS %d (%s), notes %q: want %d with %d notes", f.GOMAXPROCS, f.GOMAXPROCSFrom, f.Notes, tt.want, tt.notes)
			}
		})
	}
}

// writeMem writes a sparse file holding v at offset addr, as a process's
// memory holds it.
func writeMem(t *testing.T, path string, addr uint64, v int32) {
	t.Helper()
	m, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(v))
	if _, err := m.WriteAt(b[:], int64(addr)); err != nil {
		t.Fatal(err)
	}
}

func TestRIPLoads32(t *testing.T) {
	const pc = 0x1000
	tests := []struct {
		name string
		code []byte
		want []uint64
	}{
		// movsxd rcx, [rip+0x10]: Go's `ret := int(gomaxprocs)`.
		{"movsxd", []byte{0x48, 0x63, 0x0d, 0x10, 0, 0, 0}, []uint64{pc + 7 + 0x10}},
		// mov r9d, [rip-0x20] (REX.R, no REX.W).
		{"mov r32 rex", []byte{0x44, 0x8b, 0x0d, 0xe0, 0xff, 0xff, 0xff}, []uint64{pc + 7 - 0x20}},
		// mov eax, [rip+1] without a prefix.
		{"mov r32", []byte{0x8b, 0x05, 1, 0, 0, 0}, []uint64{pc + 6 + 1}},
		// lea rax, [rip+0x10] is not a load; mov rax, [rip+..] is 64-bit.
		{"lea and mov64", []byte{0x48, 0x8d, 0x05, 0x10, 0, 0, 0, 0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, nil},
		// movsxd without REX.W is not the form.
		{"movsxd no rex.w", []byte{0x63, 0x05, 0x10, 0, 0, 0}, nil},
		// [rax+disp32] (mod 10) is not RIP-relative.
		{"not rip", []byte{0x48, 0x63, 0x88, 0x10, 0, 0, 0}, nil},
		{"truncated", []byte{0x48, 0x63, 0x0d, 0x10, 0, 0}, nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ripLoads32(tt.code, pc)
			if len(got) != len(tt.want) {
				t.Fatalf("got %#x, want %#x", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %#x, want %#x", got, tt.want)
				}
			}
		})
	}
}

// TestGOMAXPROCSNotGo: a binary that is not Go gives no location, and no
// panic.
func TestGOMAXPROCSNotGo(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/bin/sh", self} {
		im, err := stacks.OpenImage(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			var fe *elf.FormatError
			if errors.As(err, &fe) {
				continue
			}
			t.Fatal(err)
		}
		l := findGomaxprocs(im)
		im.Close()
		if path == self && l.err != nil {
			t.Errorf("test binary: %v", l.err)
		}
		if path == "/bin/sh" && !errors.Is(l.err, errNotLocated) {
			t.Errorf("/bin/sh: located at %#x (%v)", l.addr, l.err)
		}
	}
}
