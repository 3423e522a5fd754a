package gomem

import (
	"errors"
	"fmt"

	"github.com/gosleuth/gosleuth/internal/stacks"
)

// The runtime variables the reader uses.
const (
	symAllgs          = "runtime.allgs"
	symAllglen        = "runtime.allglen"
	symAllp           = "runtime.allp"
	symGomaxprocs     = "runtime.gomaxprocs"
	symSched          = "runtime.sched"
	symMemstats       = "runtime.memstats"
	symGCController   = "runtime.gcController"
	symWork           = "runtime.work"
	symMbuckets       = "runtime.mbuckets"
	symMProfCycle     = "runtime.mProfCycle"
	symMemProfileRate = "runtime.MemProfileRate"
	symDisableMemProf = "runtime.disableMemoryProfiling"
	symClassToSize    = "runtime.class_to_size"
	symWaitReasons    = "runtime.waitReasonStrings"
)

// globalNames is every variable locateGlobals looks for.
var globalNames = []string{
	symAllgs, symAllglen, symAllp, symGomaxprocs, symSched, symMemstats, symGCController,
	symWork, symMbuckets, symMProfCycle, symMemProfileRate, symDisableMemProf, symClassToSize, symWaitReasons,
}

// locateGlobals returns the link-time address of each runtime variable the
// reader uses that im shows: from its symbol table, or in a stripped binary
// from the code that references them (globalsFromCode). how says which.
// Variables not found are absent from the map; the decoders that need them
// say so.
func locateGlobals(im *stacks.Image, l *Layout) (addrs map[string]uint64, how string, err error) {
	syms, err := im.Symbols(globalNames)
	if err == nil {
		return syms, "symbol table", nil
	}
	if !errors.Is(err, stacks.ErrNoSymtab) {
		return nil, "", fmt.Errorf("read symbol table: %w", err)
	}
	addrs, err = globalsFromCode(im, l)
	if err != nil {
		// Without the goroutines nothing of worth is left; without
		// another variable, only what needs it is missing (its reader
		// says the variable is not located).
		if addrs[symAllgs] == 0 || addrs[symAllglen] == 0 {
			return nil, "", fmt.Errorf("stripped binary: %w", err)
		}
		return addrs, "runtime code (stripped binary; " + err.Error() + ")", nil
	}
	return addrs, "runtime code (stripped binary)", nil
}
