package perf

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// ErrExited reports that every process a Follower tracks has exited.
var ErrExited = errors.New("process exited")

// Task names one thread: TID is the thread ID, PID the process (thread group)
// it belongs to.
type Task struct {
	PID, TID int
}

// Follower reports the threads of a process, and optionally of all its
// descendants, as they appear and disappear. Per-task perf events only see
// the thread they were opened on, so a source opens one event per Task that
// Poll reports as added; polling every 100-250 ms keeps up with a Go program
// starting new Ms.
//
// A Follower is not safe for concurrent use.
type Follower struct {
	fs          proc.FS
	descendants bool
	procs       map[int]bool // tracked processes (thread group IDs)
	tasks       map[Task]bool
	seen        map[Task]bool // scratch: tasks found by the current Poll
	// listers keep each tracked process's task directory open, so a
	// Poll lists threads without an ordinary system call (see
	// proc.TaskLister); tids is their scratch.
	listers map[int]*proc.TaskLister
	tids    []int
}

// NewFollower returns a Follower for pid under the proc file system at
// procRoot ("" means /proc). With descendants, child processes of any
// tracked process are tracked too, from /proc/PID/task/TID/children.
func NewFollower(procRoot string, pid int, descendants bool) *Follower {
	return &Follower{
		fs:          proc.NewFS(procRoot),
		descendants: descendants,
		procs:       map[int]bool{pid: true},
		tasks:       map[Task]bool{},
		seen:        map[Task]bool{},
		listers:     map[int]*proc.TaskLister{},
	}
}

// Close closes the descriptors the Follower keeps on the tracked
// processes' task directories.
func (f *Follower) Close() error {
	var errs []error
	for pid, l := range f.listers {
		errs = append(errs, l.Close())
		delete(f.listers, pid)
	}
	return errors.Join(errs...)
}

// Poll lists the tracked threads again. It returns the tasks that appeared
// since the last call (every task on the first call) and those that have
// gone, each sorted by PID then TID. When no tracked process is left it
// returns the last gone tasks and an error wrapping ErrExited.
func (f *Follower) Poll() (added, gone []Task, err error) {
	clear(f.seen)
	// Walk the process set; children found on the way are walked in the
	// same pass, so a fork-exec chain shows up within one Poll.
	queue := make([]int, 0, len(f.procs))
	for pid := range f.procs {
		queue = append(queue, pid)
	}
	slices.Sort(queue)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		tids, err := f.listTasks(pid)
		if err != nil {
			if errors.Is(err, proc.ErrProcessGone) {
				delete(f.procs, pid)
				continue
			}
			return nil, nil, err
		}
		for _, tid := range tids {
			t := Task{PID: pid, TID: tid}
			f.seen[t] = true
			if !f.descendants {
				continue
			}
			for _, child := range f.children(pid, tid) {
				if !f.procs[child] {
					f.procs[child] = true
					queue = append(queue, child)
				}
			}
		}
	}
	for t := range f.seen {
		if !f.tasks[t] {
			f.tasks[t] = true
			added = append(added, t)
		}
	}
	for t := range f.tasks {
		if !f.seen[t] {
			delete(f.tasks, t)
			gone = append(gone, t)
		}
	}
	sortTasks(added)
	sortTasks(gone)
	if len(f.procs) == 0 {
		return added, gone, fmt.Errorf("follow threads: %w", ErrExited)
	}
	return added, gone, nil
}

// Tasks returns the tasks known after the last Poll, sorted.
func (f *Follower) Tasks() []Task {
	out := make([]Task, 0, len(f.tasks))
	for t := range f.tasks {
		out = append(out, t)
	}
	sortTasks(out)
	return out
}

// Processes returns the tracked process IDs after the last Poll, sorted.
func (f *Follower) Processes() []int {
	out := make([]int, 0, len(f.procs))
	for pid := range f.procs {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// listTasks returns the threads of pid, in a slice valid until the next
// call; a process gone (or an exited leader awaiting its reaping) wraps
// proc.ErrProcessGone, and its lister is closed.
func (f *Follower) listTasks(pid int) ([]int, error) {
	l := f.listers[pid]
	if l == nil {
		var err error
		if l, err = f.fs.NewTaskLister(pid); err != nil {
			return nil, err
		}
		f.listers[pid] = l
	}
	tids, err := l.List(f.tids)
	f.tids = tids
	if err != nil {
		l.Close()
		delete(f.listers, pid)
	}
	return tids, err
}

// children lists the live processes thread tid of pid forked.
func (f *Follower) children(pid, tid int) []int {
	return f.fs.Children(pid, tid)
}

func sortTasks(ts []Task) {
	slices.SortFunc(ts, func(a, b Task) int {
		if a.PID != b.PID {
			return a.PID - b.PID
		}
		return a.TID - b.TID
	})
}
