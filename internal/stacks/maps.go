package stacks

import (
	"bufio"
	"bytes"
	"io"
	"sort"
	"strconv"
)

// mapping is one executable mapping of /proc/PID/maps.
type mapping struct {
	start, end, off uint64
	path            string
	obj             *object // nil when the file could not be loaded
}

// parseMaps returns the executable, file-backed mappings (and special ones
// like [vdso]) sorted by start address.
func parseMaps(r io.Reader) []mapping {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		dash := bytes.IndexByte(f[0], '-')
		if dash < 0 {
			continue
		}
		start, err1 := strconv.ParseUint(string(f[0][:dash]), 16, 64)
		end, err2 := strconv.ParseUint(string(f[0][dash+1:]), 16, 64)
		off, err3 := strconv.ParseUint(string(f[2]), 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		m := mapping{start: start, end: end, off: off}
		if len(f) >= 6 {
			m.path = string(bytes.Join(f[5:], []byte(" ")))
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// find returns the mapping containing addr.
func findMapping(ms []mapping, addr uint64) *mapping {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].end > addr })
	if i < len(ms) && ms[i].start <= addr {
		return &ms[i]
	}
	return nil
}
