//go:build !linux

package proc

// TaskLister lists the threads of one process again and again; outside
// Linux it reads the task directory afresh each time (FS.TaskIDs).
type TaskLister struct {
	fs  FS
	pid int
}

// NewTaskLister returns a lister of process pid's threads.
func (fs FS) NewTaskLister(pid int) (*TaskLister, error) {
	if _, err := fs.TaskIDs(pid); err != nil {
		return nil, err
	}
	return &TaskLister{fs: fs, pid: pid}, nil
}

// List returns the process's thread IDs, as FS.TaskIDs does.
func (l *TaskLister) List(dst []int) ([]int, error) {
	ids, err := l.fs.TaskIDs(l.pid)
	return append(dst[:0], ids...), err
}

// Close does nothing.
func (l *TaskLister) Close() error { return nil }
