package export

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	groupLabels = []string{"group_kind", "group"}

	descCPU = prometheus.NewDesc("gosleuth_group_cpu_seconds_total",
		"CPU time of the group's processes, by mode (user, system), counted from when gosleuth first saw them.", append(groupLabels, "mode"), nil)
	descWake = prometheus.NewDesc("gosleuth_group_wakeups_total",
		"Voluntary context switches summed over all threads of the group's processes: wake-ups from sleep, the cost of timers and polling at idle.", groupLabels, nil)
	descInvol = prometheus.NewDesc("gosleuth_group_involuntary_switches_total",
		"Involuntary context switches summed over all threads: preemptions, a sign of CPU contention.", groupLabels, nil)
	descProcs = prometheus.NewDesc("gosleuth_group_processes",
		"Processes in the group at the last sample.", groupLabels, nil)
	descThreads = prometheus.NewDesc("gosleuth_group_threads",
		"Threads of the group's processes at the last sample.", groupLabels, nil)
	descRSS = prometheus.NewDesc("gosleuth_group_resident_memory_bytes",
		"Resident memory summed over the group's processes (shared pages counted in each).", groupLabels, nil)
	descFDs = prometheus.NewDesc("gosleuth_group_open_fds",
		"Open file descriptors summed over the group's processes (those gosleuth may read).", groupLabels, nil)
	descFDRatio = prometheus.NewDesc("gosleuth_group_fd_limit_ratio_max",
		"The highest ratio of open descriptors to RLIMIT_NOFILE among the group's processes.", groupLabels, nil)
	descGo = prometheus.NewDesc("gosleuth_group_go_processes",
		"Go processes in the group, by the Go version they were built with.", append(groupLabels, "go_version"), nil)
	descTop = prometheus.NewDesc("gosleuth_process_info",
		"The top processes by CPU (re-ranked at most once a minute), the only series carrying PIDs; the value is their CPU in % of a core when ranked.", []string{"pid", "comm", "group_kind", "group"}, nil)
	descCollect = prometheus.NewDesc("gosleuth_exporter_collection_seconds",
		"How long the last background sample of /proc took.", nil, nil)
	descTasks = prometheus.NewDesc("gosleuth_exporter_tasks",
		"Threads read in the last sample.", nil, nil)
	descProcsSeen = prometheus.NewDesc("gosleuth_exporter_processes",
		"Processes read in the last sample.", nil, nil)
	descSeries = prometheus.NewDesc("gosleuth_exporter_group_series",
		"Groups with series of their own.", nil, nil)
	descDropped = prometheus.NewDesc("gosleuth_exporter_processes_folded_total",
		"Processes counted in the group \"other\" because the cap on groups (--max-series / 10) was reached when their group first appeared.", nil, nil)
	descRanFrom = prometheus.NewDesc("gosleuth_exporter_ran_signal_info",
		"How the exporter learns which threads ran since the last sample: source=\"bpf\" (one BPF task iterator read for every thread), \"taskstats\" (one kernel answer per process of three threads or more) or \"schedstat\" (a read per thread), with the reasons the cheaper ones are not used.", []string{"source", "reason"}, nil)
	descStill = prometheus.NewDesc("gosleuth_exporter_taskstats_still_processes",
		"Processes whose threads the last sample left unread because taskstats said none ran.", nil, nil)
	descErrors = prometheus.NewDesc("gosleuth_exporter_errors_total",
		"Background samples that failed.", nil, nil)
	descFinding = prometheus.NewDesc("gosleuth_finding",
		"1 while a finding of gosleuth's doctor holds for a process (from its last whole-host run, every --doctor-every).", []string{"id", "severity", "pid", "comm", "group_kind", "group"}, nil)
	descFindingCores = prometheus.NewDesc("gosleuth_finding_cpu_cores",
		"The CPU a finding costs, in cores, where the doctor can put it as CPU (a timer loop, a lock, exec churn).", []string{"id", "pid", "comm", "group_kind", "group"}, nil)
	descDoctorRuns = prometheus.NewDesc("gosleuth_exporter_doctor_runs_total",
		"Whole-host doctor runs finished.", nil, nil)
	descDoctorErrors = prometheus.NewDesc("gosleuth_exporter_doctor_errors_total",
		"Whole-host doctor runs that failed (the previous findings are kept).", nil, nil)
	descDoctorSeconds = prometheus.NewDesc("gosleuth_exporter_doctor_seconds",
		"How long the last doctor run took (its window included).", nil, nil)
	descAge = prometheus.NewDesc("gosleuth_exporter_last_sample_timestamp_seconds",
		"When the last background sample was taken.", nil, nil)
)

// collector writes the exporter's last snapshot.
type collector struct{ e *Exporter }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCPU, descWake, descInvol, descProcs, descThreads, descRSS, descFDs, descFDRatio,
		descGo, descTop, descCollect, descTasks, descProcsSeen, descSeries, descDropped, descErrors, descAge, descRanFrom, descStill,
		descFinding, descFindingCores, descDoctorRuns, descDoctorErrors, descDoctorSeconds} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.e.Last()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descCollect, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	for i := range s.Groups {
		g := &s.Groups[i]
		counter(descCPU, g.UserSec, g.Kind, g.Name, "user")
		counter(descCPU, g.SysSec, g.Kind, g.Name, "system")
		counter(descWake, g.Wakeups, g.Kind, g.Name)
		counter(descInvol, g.Involuntary, g.Kind, g.Name)
		gauge(descProcs, float64(g.Processes), g.Kind, g.Name)
		gauge(descThreads, float64(g.Threads), g.Kind, g.Name)
		gauge(descRSS, float64(g.RSSBytes), g.Kind, g.Name)
		gauge(descFDs, float64(g.FDs), g.Kind, g.Name)
		gauge(descFDRatio, g.WorstFDRatio, g.Kind, g.Name)
		vs := make([]string, 0, len(g.GoVersions))
		for v := range g.GoVersions {
			vs = append(vs, v)
		}
		sort.Strings(vs)
		for _, v := range vs {
			gauge(descGo, float64(g.GoVersions[v]), g.Kind, g.Name, v)
		}
	}
	for _, p := range s.Top {
		gauge(descTop, p.CPUPct, itoa(p.PID), p.Comm, p.Kind, p.Name)
	}
	for _, f := range s.Findings {
		pid := strconv.Itoa(f.PID)
		gauge(descFinding, 1, f.ID, f.Severity, pid, f.Comm, f.Kind, f.Name)
		if f.Cores > 0 {
			gauge(descFindingCores, f.Cores, f.ID, pid, f.Comm, f.Kind, f.Name)
		}
	}
	counter(descDoctorRuns, float64(s.DoctorRuns))
	counter(descDoctorErrors, float64(s.DoctorErrors))
	gauge(descDoctorSeconds, s.DoctorSeconds)
	gauge(descCollect, s.Self.CollectSeconds)
	gauge(descTasks, float64(s.Self.Tasks))
	gauge(descProcsSeen, float64(s.Self.Processes))
	gauge(descSeries, float64(len(s.Groups)))
	counter(descDropped, float64(s.Dropped))
	counter(descErrors, float64(s.Self.Errors))
	switch {
	case s.Self.BPF:
		gauge(descRanFrom, 1, "bpf", "")
	case s.Self.TaskstatsOff == "":
		gauge(descRanFrom, 1, "taskstats", s.Self.BPFOff)
	default:
		gauge(descRanFrom, 1, "schedstat", strings.TrimPrefix(s.Self.BPFOff+"; "+s.Self.TaskstatsOff, "; "))
	}
	gauge(descStill, float64(s.Self.TaskstatsStill))
	gauge(descAge, float64(s.Time.UnixNano())/1e9)
}

// Handler serves /metrics (the last snapshot, plus the exporter's own Go
// runtime and process metrics) and a small page at / saying what is
// exported.
func (e *Exporter) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{e}, rtCollector{e})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, indexPage)
	})
	return mux
}

const indexPage = `<!doctype html><meta charset="utf-8"><title>gosleuth exporter</title>
<h1>gosleuth exporter</h1>
<p><a href="/metrics">/metrics</a>: per group of processes (a systemd unit, else a container or pod
from the cgroup path, else an executable name), CPU seconds by mode, wake-ups (voluntary switches
summed over all threads), involuntary switches, processes, threads, resident memory, open descriptors
and the worst descriptor/limit ratio, Go versions; the top processes by CPU with their PIDs
(gosleuth_process_info); and the exporter's own cost (gosleuth_exporter_*). Counters are monotonic:
a process that exits keeps what it added. Scrapes write the last background sample.</p>
`
