package proc

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0", []int{0}},
		{"0-3", []int{0, 1, 2, 3}},
		{"0-1,4,6-7\n", []int{0, 1, 4, 6, 7}},
		{"", nil},
		{"a", nil},
		{"3-1", nil},
		{"0-4000000000", nil},
		{"-1", nil},
	} {
		got, err := ParseCPUList(tc.in)
		if (err != nil) != (tc.want == nil) || !slices.Equal(got, tc.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestOnlineCPUsUnderTaskset runs a test binary pinned to CPU 0: the
// online CPUs it reads are the host's, not its affinity's one CPU.
func TestOnlineCPUsUnderTaskset(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	if os.Getenv("GOSLEUTH_PRINT_ONLINE") != "" {
		c, err := OnlineCPUs()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("online " + strconv.Itoa(len(c)) + "\n")
		return
	}
	all, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatalf("taskset (util-linux) not found: %v", err)
	}
	cmd := exec.Command(taskset, "-c", "0", os.Args[0], "-test.run=^TestOnlineCPUsUnderTaskset$", "-test.v")
	cmd.Env = append(os.Environ(), "GOSLEUTH_PRINT_ONLINE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "online "+strconv.Itoa(len(all))+"\n") {
		t.Errorf("under taskset -c 0 the online CPUs read %q, want %d", out, len(all))
	}
}

func TestAverageCores(t *testing.T) {
	// Fixture: a process started 1000 ticks (10 s) after boot, read at an
	// uptime of 30 s, that used 300 ticks of user and 100 of system time:
	// 4 CPU seconds over 20 s of life.
	stat := func(utime, stime, start int) string {
		return "77 (x y) S 1 77 77 0 -1 0 0 0 0 0 " + strconv.Itoa(utime) + " " + strconv.Itoa(stime) +
			" 0 0 20 0 1 0 " + strconv.Itoa(start) + " 0 0\n"
	}
	for _, tc := range []struct {
		name, stat, uptime string
		want               float64
		wantErr            bool
	}{
		{"busy", stat(300, 100, 1000), "30.00 55.10\n", 0.2, false},
		{"two cores", stat(3000, 1000, 1000), "30.00 0.00\n", 2, false},
		{"just born", stat(0, 0, 3000), "30.00 0.00\n", 0, false},
		{"bad uptime", stat(1, 1, 1), "x\n", 0, true},
		{"bad stat", "garbage", "30.00 0.00\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.Mkdir(root+"/77", 0o755)
			os.WriteFile(root+"/77/stat", []byte(tc.stat), 0o644)
			os.WriteFile(root+"/uptime", []byte(tc.uptime), 0o644)
			got, err := NewFS(root).AverageCores(77)
			if (err != nil) != tc.wantErr || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("AverageCores = %v, %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
	if _, err := NewFS("").AverageCores(1 << 30); !errors.Is(err, ErrProcessGone) {
		t.Errorf("AverageCores of a missing PID: %v, want ErrProcessGone", err)
	}
}

// TestAverageCoresLive spins this test process on one core for half a
// second and reads its own average: more than nothing, at most every CPU.
func TestAverageCoresLive(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
	}
	got, err := NewFS("").AverageCores(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got <= 0 || got > float64(runtime.NumCPU())+0.05 {
		t.Errorf("own average cores %v after a 0.5 s spin, want in (0, %d]", got, runtime.NumCPU())
	}
}
