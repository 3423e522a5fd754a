package proc

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

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
