package compare

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// reaperScript keeps the process groups compare started, read from its
// standard input as "+ PGID" and "- PGID" lines, and at end of input kills
// every group still kept. It ignores the signals a terminal or a group
// kill would send it, so that it outlives compare.
const reaperScript = `trap '' INT TERM HUP QUIT
groups=" "
while read -r op g; do
	case $op in
	+) groups="$groups$g " ;;
	-) case $groups in *" $g "*) groups="${groups%% $g *} ${groups#* $g }" ;; esac ;;
	esac
done
for g in $groups; do kill -9 -"$g" 2>/dev/null; done
`

// reaper kills the process groups compare started when compare ends,
// however it ends. Its input is a pipe whose only write end is compare's
// (close-on-exec, so no side inherits it): the kernel closes it when
// compare exits, SIGKILL included, and the reaper then kills every group
// compare had not stopped itself. PR_SET_PDEATHSIG on a side's shell would
// not do: it reaches the shell alone, not the programs the shell forked,
// and it fires when the thread that started the shell exits, which in a Go
// program need not be when the process does.
type reaper struct {
	w   *os.File
	cmd *exec.Cmd
}

// startReaper starts the reaper, in a process group of its own (a ^C at
// the terminal reaches compare, which stops its sides itself).
func startReaper() (*reaper, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("compare: start reaper: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", reaperScript)
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pr.Close()
	if err != nil {
		pw.Close()
		return nil, fmt.Errorf("compare: start reaper: %w", err)
	}
	return &reaper{w: pw, cmd: cmd}, nil
}

// add hands process group pgid to the reaper. A write that fails (the
// reaper was killed) leaves the group to compare's own stop.
func (rp *reaper) add(pgid int) {
	if rp != nil {
		rp.w.WriteString("+ " + strconv.Itoa(pgid) + "\n")
	}
}

// remove takes back pgid once compare has killed its group, so that a
// later group given the same number is not the reaper's to kill.
func (rp *reaper) remove(pgid int) {
	if rp != nil {
		rp.w.WriteString("- " + strconv.Itoa(pgid) + "\n")
	}
}

// close ends the reaper (it kills any group still handed to it) and waits
// for it.
func (rp *reaper) close() {
	if rp != nil {
		rp.w.Close()
		rp.cmd.Wait()
	}
}
