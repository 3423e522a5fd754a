package main

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// testURLOwner gives inspect, doctor and load the pprof URL of one patient
// with the PID of another: each refuses in one line naming the process
// that serves the URL, and points to the memory source. The patient's own
// URL, and the URL of a process its PID started, are accepted.
func testURLOwner(t *testing.T, bin string) {
	server, url := startPatientAt(t, bin, "-mode", "idle", "-pprof")
	other := startInspectPatient(t, bin, "-mode", "idle")
	spid, opid := strconv.Itoa(server.Process.Pid), strconv.Itoa(other.Process.Pid)
	for _, args := range [][]string{
		{"inspect", "--pid", opid, "--pprof-url", url, "--duration", "200ms", "--groups", "0"},
		{"inspect", "--pid", opid, "--metrics-url", url + "/metrics", "--duration", "200ms", "--groups", "0"},
		{"doctor", "--pid", opid, "--pprof-url", url, "--duration", "2s"},
		{"load", url + "/debug/pprof/cmdline", "--watch", opid, "--pprof-url", url, "--rate", "1", "--duration", "1s", "--quiet"},
		{"compare", "--pid-a", opid, "--pid-b", spid, "--metrics-url-a", url + "/metrics", "--windows", "2", "--window", "1s"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), "served by pid "+spid) || !strings.Contains(err.Error(), "memory") ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line naming pid %s as the URL's server and the memory source", args, err, spid)
		}
	}
	// Its own URL is accepted, without a warning.
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"inspect", "--pid", spid, "--pprof-url", url, "--duration", "200ms", "--groups", "0"}, &out, &errb); err != nil || errb.Len() > 0 {
		t.Errorf("own URL: %v, stderr %q", err, errb.String())
	}
	// A shell whose child serves the URL: the child's is the shell's.
	sh := exec.Command("/bin/sh", "-c", `"$0" -mode idle -pprof; true`, bin)
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-sh.Process.Pid, syscall.SIGKILL); sh.Wait() })
	ready, err := bufio.NewReader(pipe).ReadString('\n')
	if err != nil {
		t.Fatalf("child of the shell: %v", err)
	}
	childURL := strings.TrimSpace(strings.TrimPrefix(ready, "ready "))
	out.Reset()
	errb.Reset()
	if err := run(context.Background(), []string{"inspect", "--pid", strconv.Itoa(sh.Process.Pid), "--pprof-url", childURL, "--duration", "200ms", "--groups", "0"}, &out, &errb); err != nil || errb.Len() > 0 {
		t.Errorf("child's URL: %v, stderr %q", err, errb.String())
	}
}
