package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFDScannerCatchesReopenedFile: a goroutine re-reads one file in a
// loop while another file stays open; listings of this process's
// descriptors catch the re-read file open now and then and never report
// the kept one.
func TestFDScannerCatchesReopenedFile(t *testing.T) {
	dir := t.TempDir()
	churn := filepath.Join(dir, "churn.conf")
	kept := filepath.Join(dir, "kept.log")
	if err := os.WriteFile(churn, []byte(strings.Repeat("x", 64<<10)), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(kept)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := NewFS("").NewFDScanner(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := os.ReadFile(churn); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	caught := map[string]int{}
	deadline := time.Now().Add(5 * time.Second)
	for scans := 0; caught[churn] < 5 && time.Now().Before(deadline); scans++ {
		if err := s.Scan(func(fd int, target string) { caught[target]++ }); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
	t.Logf("caught %v", caught)
	if caught[churn] < 5 {
		t.Errorf("the re-read file was caught %d times in 5 s of listings, want 5", caught[churn])
	}
	if caught[kept] != 0 {
		t.Errorf("the file kept open was reported %d times: only descriptors new since the last listing are", caught[kept])
	}
}

// TestFDScannerGone: a process that exits is told apart from one that
// closed everything.
func TestFDScannerGone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	s, err := NewFS("").NewFDScanner(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Scan(func(int, string) {}); err != nil {
		t.Fatalf("scan a live process: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := s.Scan(func(int, string) {}); !errors.Is(err, ErrProcessGone) {
		t.Errorf("scan after exit: %v, want ErrProcessGone", err)
	}
	if _, err := NewFS("").NewFDScanner(cmd.Process.Pid); !errors.Is(err, ErrProcessGone) {
		t.Errorf("open after exit: %v, want ErrProcessGone", err)
	}
}
