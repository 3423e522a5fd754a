package proc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FS is a procfs mount ("/proc", or "/host/proc" for a container watching
// its host, or a fixture tree in tests). Every /proc path gosleuth reads
// outside the Reader's kept-descriptor hot path is built by an FS, so a
// --proc ROOT reaches every part of a command. The zero FS is /proc.
type FS struct{ root string }

// NewFS returns the procfs mounted at root ("" means /proc).
func NewFS(root string) FS { return FS{root: root} }

// Root is the mount point.
func (fs FS) Root() string {
	if fs.root == "" {
		return "/proc"
	}
	return fs.root
}

// Path joins elements under the mount: Path("42", "maps") is
// ROOT/42/maps.
func (fs FS) Path(elem ...string) string {
	return filepath.Join(append([]string{fs.Root()}, elem...)...)
}

// PID is the directory of process pid: ROOT/PID.
func (fs FS) PID(pid int, elem ...string) string {
	return fs.Path(append([]string{strconv.Itoa(pid)}, elem...)...)
}

// Open opens ROOT/PID/elem... for reading, for a file the caller keeps
// open and re-reads from offset 0 (a thread's syscall or stat file).
func (fs FS) Open(pid int, elem ...string) (*os.File, error) {
	return os.Open(fs.PID(pid, elem...))
}

// OnlineCPUs counts the host's online CPUs from ROOT/stat (one "cpuN" line
// each). This is the host's count, not gosleuth's own affinity (which
// runtime.NumCPU gives, wrong under taskset or a cpuset), and it is read
// through the mount, so a container given the host's /proc sees the host.
func (fs FS) OnlineCPUs() (int, error) {
	f, err := os.Open(fs.Path("stat"))
	if err != nil {
		return 0, fmt.Errorf("count online CPUs: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Bytes()
		if len(l) > 3 && bytes.HasPrefix(l, []byte("cpu")) && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("count online CPUs: %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("count online CPUs: no cpuN line in %s: %w", fs.Path("stat"), ErrParse)
	}
	return n, nil
}

// AllowedCPUs returns the CPUs process pid may run on: from
// sched_getaffinity where ROOT is this process's procfs, else from the
// Cpus_allowed_list line of ROOT/PID/status.
func (fs FS) AllowedCPUs(pid int) ([]int, error) {
	if cpus, ok := fs.affinity(pid); ok {
		return cpus, nil
	}
	b, err := os.ReadFile(fs.PID(pid, "status"))
	if err != nil {
		return nil, fmt.Errorf("read allowed CPUs of process %d: %w", pid, goneErr(pid, err))
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return ParseCPUList(v)
		}
	}
	return nil, fmt.Errorf("read allowed CPUs of process %d: no Cpus_allowed_list: %w", pid, ErrParse)
}

// TaskIDs lists the threads of process pid, from ROOT/PID/task, in the
// directory's order. A process that is gone, has no threads left, or is an
// exited leader its parent has not reaped (a zombie alone in its group)
// gives an error wrapping ErrProcessGone: nothing runs there any more.
func (fs FS) TaskIDs(pid int) ([]int, error) {
	ents, err := os.ReadDir(fs.PID(pid, "task"))
	if err != nil {
		if os.IsPermission(err) {
			// A process that exits between the lookup and the read can
			// show as a permission error; tell that from a real one.
			if _, serr := os.Stat(fs.PID(pid)); serr != nil {
				err = serr
			}
		}
		return nil, fmt.Errorf("list threads of process %d: %w", pid, goneErr(pid, err))
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	if len(out) == 0 || len(out) == 1 && out[0] == pid && errors.Is(CheckTarget(fs.root, pid), ErrZombie) {
		return nil, fmt.Errorf("list threads of process %d: %w", pid, ErrProcessGone)
	}
	return out, nil
}

// Children lists the live processes thread tid of process pid forked, from
// ROOT/PID/task/TID/children; nil when the thread has gone.
func (fs FS) Children(pid, tid int) []int {
	b, err := os.ReadFile(fs.PID(pid, "task", strconv.Itoa(tid), "children"))
	if err != nil {
		return nil
	}
	var out []int
	for _, s := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(s); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// ThreadComm is the name of thread tid of process pid ("" when it exited).
func (fs FS) ThreadComm(pid, tid int) string {
	b, err := os.ReadFile(fs.PID(pid, "task", strconv.Itoa(tid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// Exe is where ROOT/PID/exe points.
func (fs FS) Exe(pid int) (string, error) {
	p, err := os.Readlink(fs.PID(pid, "exe"))
	if err != nil {
		return "", fmt.Errorf("read executable of process %d: %w", pid, goneErr(pid, err))
	}
	return p, nil
}

// goneErr adds ErrProcessGone to a not-exist error, so callers can tell a
// process that exited from a file they may not read.
func goneErr(pid int, err error) error {
	if os.IsNotExist(err) {
		return fmt.Errorf("%w (%w)", ErrProcessGone, err)
	}
	return err
}

// ThreadStartTime is when thread tid of process pid started, in
// ClockTicks after boot.
func (fs FS) ThreadStartTime(pid, tid int) (uint64, error) {
	b, err := os.ReadFile(fs.PID(pid, "task", strconv.Itoa(tid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read start of thread %d: %w", tid, goneErr(pid, err))
	}
	var s statFields
	if err := parseStat(b, &s); err != nil {
		return 0, fmt.Errorf("read start of thread %d: %w", tid, err)
	}
	return s.StartTime, nil
}

// AverageCores is the CPU process pid has used since it started, in cores
// (CPU seconds per second of its life): a cheap prior for how busy it is,
// from two small reads and no waiting. A process younger than one clock
// tick reads as 0.
func (fs FS) AverageCores(pid int) (float64, error) {
	b, err := os.ReadFile(fs.PID(pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("read CPU use of process %d: %w", pid, goneErr(pid, err))
	}
	var s statFields
	if err := parseStat(b, &s); err != nil {
		return 0, fmt.Errorf("read CPU use of process %d: %w", pid, err)
	}
	up, err := os.ReadFile(fs.Path("uptime"))
	if err != nil {
		return 0, fmt.Errorf("read uptime: %w", err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(up)), " ")
	upSec, err := strconv.ParseFloat(first, 64)
	if err != nil || upSec < 0 {
		return 0, fmt.Errorf("read uptime: %q: %w", first, ErrParse)
	}
	life := upSec - float64(s.StartTime)/ClockTicks
	if life < 1.0/ClockTicks {
		return 0, nil
	}
	return float64(s.UTime+s.STime) / ClockTicks / life, nil
}

// Comm is the name of process pid ("" when it exited).
func (fs FS) Comm(pid int) string {
	b, err := os.ReadFile(fs.PID(pid, "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// Sysctl reads a kernel setting under ROOT/sys ("kernel/perf_event_paranoid"),
// trimmed.
func (fs FS) Sysctl(name string) (string, error) {
	b, err := os.ReadFile(fs.Path("sys", name))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// SelfFDs counts the descriptors gosleuth itself has open (ROOT/self/fd),
// -1 when unreadable.
func (fs FS) SelfFDs() int {
	ents, err := os.ReadDir(fs.Path("self", "fd"))
	if err != nil {
		return -1
	}
	return len(ents)
}

// Mapping is one line of ROOT/PID/maps.
type Mapping struct {
	Start, End, Offset uint64
	// Read and Exec are the mapping's r and x permissions.
	Read, Exec bool
	Path       string
}

// Maps reads the memory mappings of process pid.
func (fs FS) Maps(pid int) ([]Mapping, error) {
	f, err := os.Open(fs.PID(pid, "maps"))
	if err != nil {
		return nil, fmt.Errorf("read mappings of process %d: %w", pid, goneErr(pid, err))
	}
	defer f.Close()
	var out []Mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || end < start {
			continue
		}
		m := Mapping{Start: start, End: end, Offset: off, Read: strings.HasPrefix(fields[1], "r"), Exec: strings.Contains(fields[1], "x")}
		if len(fields) >= 6 {
			m.Path = strings.Join(fields[5:], " ")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mappings of process %d: %w", pid, err)
	}
	return out, nil
}
