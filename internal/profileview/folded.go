package profileview

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gosleuth/gosleuth/internal/stacks"
)

// WriteFolded writes one line per distinct stack, root first, frames
// separated by ';' (kernel frames suffixed "_[k]", as perf's
// stackcollapse does), then a space and the sample count. The thread name
// is the root frame. Off-CPU stacks hang under an "[off-cpu]" root, with
// their blocked time counted in sampling periods.
func WriteFolded(w io.Writer, p *stacks.Profile) error {
	agg := map[string]int64{}
	var b strings.Builder
	all := append(append([]stacks.SymStack(nil), p.Stacks...), p.OffCPU...)
	for _, st := range all {
		b.Reset()
		n := st.Count
		if st.OffCPU {
			b.WriteString(stacks.OffCPURoot + ";")
			n = p.OffWeight(st)
		}
		b.WriteString(stacks.ThreadRoot(st.TID, p.Threads[st.TID]))
		for i := len(st.Frames) - 1; i >= 0; i-- {
			f := st.Frames[i]
			b.WriteByte(';')
			b.WriteString(strings.ReplaceAll(f.Func, ";", ":"))
			if f.Kernel {
				b.WriteString("_[k]")
			}
		}
		agg[b.String()] += n
	}
	keys := make([]string, 0, len(agg))
	for k := range agg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.Reset()
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d\n", k, agg[k])
	}
	_, err := io.WriteString(w, b.String())
	return err
}
