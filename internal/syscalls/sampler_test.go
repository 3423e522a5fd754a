//go:build linux

package syscalls

import (
	"io"
	"sync"
	"syscall"
	"testing"
	"time"
)

// samplePatient runs a patient under a Sampler attached to its threads
// before it works, polling the rings as the CLI does.
func samplePatient(t *testing.T, latency bool, args ...string) *Sampler {
	t.Helper()
	needPerf(t)
	p := startPatient(t, args...)
	s, err := NewSampler(latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := &Counter{pid: p.PID()}
	tids, err := c.listTasks()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddThreads(tids); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s.Poll()
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	io.WriteString(p.in, "go\n")
	p.expect(t, "done")
	close(stop)
	wg.Wait()
	s.Poll()
	return s
}

func TestSamplerErrors(t *testing.T) {
	s := samplePatient(t, false, "-threads", "3", "-calls", "1000", "-fail", "4000")
	nr, _ := Number(HostArch, "close")
	st := s.Stats()[nr]
	if st == nil {
		t.Fatal("no failed close seen")
	}
	if got := st.Failed[syscall.EBADF]; got != 12000 || s.Lost() != 0 {
		t.Errorf("close EBADF %d (lost %d), want 12000", got, s.Lost())
	}
	ppid, _ := Number(HostArch, "getppid")
	if s.Stats()[ppid] != nil {
		t.Errorf("successful getppid calls were recorded: the ret < 0 filter does not work")
	}
}

func TestSamplerLatency(t *testing.T) {
	s := samplePatient(t, true, "-threads", "2", "-calls", "20000")
	nr, _ := Number(HostArch, "getppid")
	st := s.Stats()[nr]
	if st == nil || st.Latency == nil {
		t.Fatal("no getppid seen")
	}
	n := st.Latency.TotalCount()
	t.Logf("getppid: %d timed, mean %.0f ns, p99 %d ns, lost %d", n, st.Latency.Mean(), st.Latency.ValueAtQuantile(99), s.Lost())
	if s.Lost() == 0 && (st.Calls != 40000 || n != 40000) {
		t.Errorf("getppid exits %d, timed %d, want 40000 (none lost)", st.Calls, n)
	}
	if s.Lost() > 0 && st.Calls >= 40000 {
		t.Errorf("records lost yet %d exits seen", st.Calls)
	}
	if mean := st.Latency.Mean(); mean <= 0 || mean > 1e6 {
		t.Errorf("mean getppid latency %.0f ns", mean)
	}
}
