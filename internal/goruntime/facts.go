package goruntime

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Facts is what gosleuth learns about a process from outside, without its
// cooperation: /proc and the executable's build information.
type Facts struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	// Exe is the executable's path as /proc/PID/exe names it.
	Exe string `json:"exe,omitempty"`
	// UID is the process's real user ID; NSPID its PID in its own PID
	// namespace (the PID its agent socket is named after).
	UID   int `json:"uid"`
	NSPID int `json:"nspid"`
	// Container is the container the process runs in as its cgroup path
	// or mounts name it; nil on the host or when no runtime is recognised.
	Container *proc.Container `json:"container,omitempty"`

	// IsGo tells whether the executable carries Go build information.
	// ExeUnreadable says the executable could not be read (another user's
	// process, without root): IsGo is then unknown rather than false.
	IsGo          bool `json:"is_go"`
	ExeUnreadable bool `json:"exe_unreadable,omitempty"`
	// GoVersion is the toolchain that built it ("go1.26.8").
	GoVersion string `json:"go_version,omitempty"`
	// Path is the main package's import path, Module and ModuleVersion the
	// main module ("(devel)" for a local build).
	Path          string `json:"path,omitempty"`
	Module        string `json:"module,omitempty"`
	ModuleVersion string `json:"module_version,omitempty"`
	// Settings are the build settings in the order recorded (CGO_ENABLED,
	// -race, GOEXPERIMENT, GOAMD64, DefaultGODEBUG, vcs.revision, ...).
	Settings []Setting `json:"settings,omitempty"`
	// CGO, Race, Experiment, Arch level and DefaultGODEBUG are picked from
	// Settings. DefaultGODEBUG is derived by the toolchain from the main
	// module's go.mod go line and //go:debug directives; GoModBelow125 says
	// it carries the settings the go line of a module older than Go 1.25
	// implies (the go line itself is not recorded).
	CGO            bool   `json:"cgo"`
	Race           bool   `json:"race"`
	Experiment     string `json:"goexperiment,omitempty"`
	ArchLevel      string `json:"arch_level,omitempty"`
	DefaultGODEBUG string `json:"default_godebug,omitempty"`
	GoModBelow125  bool   `json:"gomod_below_1_25,omitempty"`

	// EnvReadable says whether /proc/PID/environ could be read (it needs
	// the same user or root). EnvGOMAXPROCS and EnvGODEBUG are the values
	// the process started with, empty when unset.
	EnvReadable   bool   `json:"env_readable"`
	EnvGOMAXPROCS string `json:"env_gomaxprocs,omitempty"`
	EnvGODEBUG    string `json:"env_godebug,omitempty"`
	// XDGRuntimeDir is the process's XDG_RUNTIME_DIR, where its agent puts
	// its socket.
	XDGRuntimeDir string `json:"-"`

	// GOMAXPROCS is the value the process runs with as far as can be told
	// from outside, and GOMAXPROCSFrom says how it was found: read from
	// the process's memory where gosleuth may (root), which sees a
	// runtime.GOMAXPROCS call in its code; else from the environment or
	// computed as the process's Go version does at start. A runtime source
	// (agent, pprof, metrics), where there is one, gives the live value too
	// and is preferred by the commands.
	GOMAXPROCS     int    `json:"gomaxprocs,omitempty"`
	GOMAXPROCSFrom string `json:"gomaxprocs_from,omitempty"`

	// AllowedCPUs is the number of CPUs in the process's affinity mask,
	// AllowedCPUList the mask as Linux prints it ("0-1").
	AllowedCPUs    int    `json:"allowed_cpus"`
	AllowedCPUList string `json:"allowed_cpu_list,omitempty"`
	// Cgroup describes the CPU controller of the process's cgroup.
	Cgroup CgroupCPU `json:"cgroup"`

	// Notes say what could not be read and why.
	Notes []string `json:"notes,omitempty"`
}

// Setting is one build setting of a Go executable.
type Setting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// CgroupCPU is the CPU controller of a cgroup: its limit and throttling.
type CgroupCPU struct {
	// Version is 1 or 2, 0 when no CPU controller was found.
	Version int `json:"version,omitempty"`
	// Path is the cgroup's path in the hierarchy.
	Path string `json:"path,omitempty"`
	// Limit is the CPU limit in CPUs (quota/period), the smallest along the
	// path to the root; 0 when unlimited.
	Limit float64 `json:"limit_cpus,omitempty"`
	// Periods, Throttled and ThrottledSeconds are cpu.stat's nr_periods,
	// nr_throttled and throttled time of the process's own cgroup.
	Periods          uint64  `json:"nr_periods"`
	Throttled        uint64  `json:"nr_throttled"`
	ThrottledSeconds float64 `json:"throttled_seconds"`
}

// Discover reads what /proc and the executable tell about process pid.
// procRoot is the procfs mount (/proc when empty); the cgroup filesystem is read
// through procRoot/PID/root, so fixtures under testdata/ work and a
// process in another mount namespace is read in its own view. An error is
// returned only when the process cannot be read at all; a process that is
// not Go gives Facts with IsGo false and no error.
func Discover(procRoot string, pid int) (*Facts, error) {
	f, err := discoverIdentity(procRoot, pid)
	if err != nil {
		return nil, err
	}
	pfs := proc.NewFS(procRoot)
	f.readBuild(pfs.PID(pid, "exe"))
	f.Cgroup = readCgroupCPU(pfs, pid, f)
	if c, ok, err := pfs.Container(pid); err == nil && ok {
		f.Container = &c
	}
	f.computeGOMAXPROCS()
	f.readGOMAXPROCS(pfs, pid)
	return f, nil
}

// discoverIdentity reads what finding the process's agent needs (its
// status for the UID and namespaced PID, its environment for
// XDG_RUNTIME_DIR, the executable's path) and none of what reading the
// executable costs: Discover's build info and GOMAXPROCS parse the whole
// binary, which was a quarter of the exporter's CPU when it looked for
// agents and its RSS peak when the binaries were large.
func discoverIdentity(procRoot string, pid int) (*Facts, error) {
	dir := proc.NewFS(procRoot).PID(pid)
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("process %d not found", pid)
		}
		return nil, fmt.Errorf("read status of process %d: %w", pid, err)
	}
	f := &Facts{PID: pid, NSPID: pid}
	parseStatus(status, f)
	f.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
		f.EnvReadable = true
		parseEnviron(env, f)
	} else {
		f.note("environment unreadable (%v): GOMAXPROCS and GODEBUG from the environment unknown", errors.Unwrap(err))
	}
	return f, nil
}

func (f *Facts) note(format string, args ...any) {
	f.Notes = append(f.Notes, fmt.Sprintf(format, args...))
}

func (f *Facts) readBuild(exe string) {
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			f.ExeUnreadable = true
			f.note("executable unreadable (%v): cannot tell whether it is Go", err)
		}
		return
	}
	f.IsGo = true
	f.GoVersion = bi.GoVersion
	f.Path = bi.Path
	f.Module, f.ModuleVersion = bi.Main.Path, bi.Main.Version
	for _, s := range bi.Settings {
		f.Settings = append(f.Settings, Setting{s.Key, s.Value})
		switch s.Key {
		case "CGO_ENABLED":
			f.CGO = s.Value == "1"
		case "-race":
			f.Race = s.Value == "true"
		case "GOEXPERIMENT":
			f.Experiment = s.Value
		case "GOAMD64", "GOARM", "GOARM64", "GO386", "GOPPC64", "GORISCV64", "GOMIPS", "GOMIPS64", "GOWASM":
			f.ArchLevel = s.Key + "=" + s.Value
		case "DefaultGODEBUG":
			f.DefaultGODEBUG = s.Value
		}
	}
	// The toolchain writes containermaxprocs=0 and updatemaxprocs=0 into
	// DefaultGODEBUG for a main module whose go line is below 1.25.
	f.GoModBelow125 = godebugValue(f.DefaultGODEBUG, "containermaxprocs") == "0"
}

// parseStatus takes Name, Uid, NSpid and Cpus_allowed_list from
// /proc/PID/status.
func parseStatus(b []byte, f *Facts) {
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "Name":
			f.Comm = string(v)
		case "Uid":
			if fs := bytes.Fields(v); len(fs) > 0 {
				f.UID, _ = strconv.Atoi(string(fs[0]))
			}
		case "NSpid":
			if fs := bytes.Fields(v); len(fs) > 0 {
				if n, err := strconv.Atoi(string(fs[len(fs)-1])); err == nil {
					f.NSPID = n
				}
			}
		case "Cpus_allowed":
			if f.AllowedCPUList == "" {
				f.AllowedCPUs = countCPUMask(string(v))
			}
		case "Cpus_allowed_list":
			f.AllowedCPUList = string(v)
			if cpus, err := proc.ParseCPUList(string(v)); err == nil {
				f.AllowedCPUs = len(cpus)
			}
		}
	}
}

// countCPUMask counts the bits of a hexadecimal mask such as "ff,ffffffff";
// used for fixtures that only carry Cpus_allowed.
func countCPUMask(s string) int {
	n := 0
	for _, w := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(w, 16, 64)
		if err != nil {
			return 0
		}
		n += bits.OnesCount64(v)
	}
	return n
}

func parseEnviron(b []byte, f *Facts) {
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			continue
		}
		switch string(k) {
		case "GOMAXPROCS":
			f.EnvGOMAXPROCS = string(v)
		case "GODEBUG":
			f.EnvGODEBUG = string(v)
		case "XDG_RUNTIME_DIR":
			f.XDGRuntimeDir = string(v)
		}
	}
}

// godebugValue returns the value of key in a comma-separated GODEBUG list;
// the last occurrence wins, as in the runtime.
func godebugValue(list, key string) string {
	val := ""
	for kv := range strings.SplitSeq(list, ",") {
		if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == key {
			val = v
		}
	}
	return val
}

// GoVersionAtLeast reports whether a Go version string such as "go1.25.3",
// "go1.26rc1" or "devel go1.27-abcdef" is at least major.minor. Unparsable
// versions are treated as new (true): devel builds are ahead of releases.
func GoVersionAtLeast(v string, major, minor int) bool {
	i := strings.Index(v, "go1.")
	if i < 0 {
		return true
	}
	rest := v[i+4:]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	m, err := strconv.Atoi(rest[:j])
	if err != nil {
		return true
	}
	return 1 > major || (1 == major && m >= minor)
}

// errNotLocated says the executable does not show where runtime.gomaxprocs
// is.
var errNotLocated = errors.New("runtime.gomaxprocs not located")

// readGOMAXPROCS replaces the computed GOMAXPROCS by the value the process
// holds in its memory, when that can be read: it is live, and a program
// that calls runtime.GOMAXPROCS(32) on 2 CPUs runs with 32 whatever its
// environment and CPUs say.
func (f *Facts) readGOMAXPROCS(pfs proc.FS, pid int) {
	if !f.IsGo {
		return
	}
	n, how, err := liveGOMAXPROCS(pfs, pid, f.Exe)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return
	case errors.Is(err, errNotLocated):
		if f.GOMAXPROCS > 0 {
			f.GOMAXPROCSFrom += "; not read from memory (" + err.Error() + "): a runtime.GOMAXPROCS call in the code is not seen"
		}
		return
	case err != nil:
		f.note("GOMAXPROCS not read from the process's memory (%v): a runtime.GOMAXPROCS call in its code is not seen", err)
		return
	}
	// Say what the start-up computation gives too: agreeing, it tells why
	// the value is what it is; differing, that the code set it.
	from := "read from the process's memory (" + how + ")"
	switch {
	case f.GOMAXPROCS == n:
		from += "; agrees with " + f.GOMAXPROCSFrom
	case f.GOMAXPROCS > 0 && f.EnvGOMAXPROCS != "":
		from += "; the environment says GOMAXPROCS=" + f.EnvGOMAXPROCS
	case f.GOMAXPROCS > 0:
		from += fmt.Sprintf("; Go's default here would be %d (%s)", f.GOMAXPROCS, f.GOMAXPROCSFrom)
	}
	f.GOMAXPROCS, f.GOMAXPROCSFrom = n, from
}

// computeGOMAXPROCS decides GOMAXPROCS the way the process's Go version
// does at start: the GOMAXPROCS environment variable when set to a positive
// number; otherwise the CPUs in the affinity mask, and, from Go 1.25 unless
// GODEBUG containermaxprocs=0, no more than the cgroup CPU limit rounded up
// (but not below 2).
func (f *Facts) computeGOMAXPROCS() {
	if !f.IsGo {
		return
	}
	if n, err := strconv.Atoi(strings.TrimSpace(f.EnvGOMAXPROCS)); err == nil && n > 0 {
		f.GOMAXPROCS = n
		f.GOMAXPROCSFrom = "environment GOMAXPROCS=" + f.EnvGOMAXPROCS
		return
	}
	if f.AllowedCPUs <= 0 {
		f.note("CPU affinity unknown: GOMAXPROCS unknown")
		return
	}
	procs := f.AllowedCPUs
	from := fmt.Sprintf("computed: %d CPUs in the affinity mask", procs)
	if !f.EnvReadable {
		from += " (environment unreadable: a GOMAXPROCS variable would override)"
	}
	cgroupAware := GoVersionAtLeast(f.GoVersion, 1, 25)
	switch {
	case !cgroupAware:
		if f.Cgroup.Limit > 0 {
			from += fmt.Sprintf("; %s ignores the cgroup CPU limit (%.2g CPUs)", f.GoVersion, f.Cgroup.Limit)
		}
	case godebugValue(f.DefaultGODEBUG+","+f.EnvGODEBUG, "containermaxprocs") == "0":
		if f.Cgroup.Limit > 0 {
			from += fmt.Sprintf("; cgroup limit (%.2g CPUs) ignored: containermaxprocs=0", f.Cgroup.Limit)
		}
	case f.Cgroup.Limit > 0:
		lim := max(int(math.Ceil(f.Cgroup.Limit)), 2)
		if lim < procs {
			procs = lim
			from = fmt.Sprintf("computed: cgroup CPU limit %.2g rounded up to %d (affinity allows %d)",
				f.Cgroup.Limit, lim, f.AllowedCPUs)
		} else {
			from += fmt.Sprintf("; the cgroup limit of %.2g CPUs gives %d (rounded up, at least 2), no lower", f.Cgroup.Limit, lim)
		}
	}
	f.GOMAXPROCS = procs
	f.GOMAXPROCSFrom = from
}
