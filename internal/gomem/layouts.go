package gomem

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// tableRange is a run of patches of one Go release that share a layout
// (patches can change it: Go 1.23's later patches grew runtime.timer and
// added a wait reason). The generator builds the reference program with
// the first and last patch of each run and with patches in between until
// every boundary is found between two adjacent patches; a patch at a
// boundary that the module proxy does not serve is in no run.
type tableRange struct {
	release     string // "go1.23"
	first, last int    // patch numbers, inclusive; 0 is the release itself ("go1.20", "go1.21.0")
	layout      *Layout
}

// tableLayout returns the layout table of the Go release that goVersion
// names as a binary's build information spells it ("go1.22.12",
// "go1.21.0", "go1.20"). Pre-releases, development builds, builds with a
// GOEXPERIMENT that is not the release's default, releases without a
// table, and patches newer than the newest tabled (a patch may change the
// layout) are refused: their layout is not known, and a guessed one would
// read wrong memory as if it were right. The layout returned is the
// caller's own copy.
func tableLayout(goVersion string) (*Layout, error) {
	release, patch, err := parseRelease(goVersion)
	if err != nil {
		return nil, err
	}
	newest := -1
	for _, r := range tables {
		if r.release != release {
			continue
		}
		newest = max(newest, r.last)
		if patch < r.first || patch > r.last {
			continue
		}
		t := r.layout
		return &Layout{
			Go:          t.Go,
			From:        t.From,
			Offsets:     maps.Clone(t.Offsets),
			Sizes:       maps.Clone(t.Sizes),
			WaitReasons: slices.Clone(t.WaitReasons),
		}, nil
	}
	switch {
	case newest < 0:
		return nil, fmt.Errorf("Go release %s: no layout table (tables cover %s), reads nothing", goVersion, tabledRange())
	case patch > newest:
		return nil, fmt.Errorf("Go %s: newer than the newest patch tabled (%s.%d), whose layout a patch may change: no table, reads nothing", goVersion, release, newest)
	}
	return nil, fmt.Errorf("Go %s: a patch at a layout change that no table covers, reads nothing", goVersion)
}

// parseRelease splits a release version ("go1.22.12") into its release
// ("go1.22") and patch (12; 0 for "go1.20"), or says why the version names
// no release.
func parseRelease(v string) (release string, patch int, err error) {
	if strings.HasPrefix(v, "devel") {
		return "", 0, fmt.Errorf("Go %q is a development build: its layout is not tabled, reads nothing", v)
	}
	if base, exp, ok := strings.Cut(v, " "); ok {
		return "", 0, fmt.Errorf("Go %s built with %q: the tables hold the release's default build only, reads nothing", base, exp)
	}
	rest, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return "", 0, fmt.Errorf("Go version %q: not a Go 1 release, reads nothing", v)
	}
	minor, p, hasPatch := strings.Cut(rest, ".")
	if i := strings.IndexAny(minor, "abcdefghijklmnopqrstuvwxyz"); i > 0 && !hasPatch && number(minor[:i]) >= 0 {
		return "", 0, fmt.Errorf("Go %s is a pre-release: only releases' layouts are tabled, reads nothing", v)
	}
	if !hasPatch {
		p = "0"
	}
	if number(minor) < 0 || number(p) < 0 {
		return "", 0, fmt.Errorf("Go version %q: not a release version, reads nothing", v)
	}
	return "go1." + minor, number(p), nil
}

// number parses a decimal number without sign or leading zero, -1 if s is
// not one.
func number(s string) int {
	if s == "" || len(s) > 1 && s[0] == '0' || len(s) > 9 || strings.ContainsAny(s, "+-") {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// tabledRange names the first and last release with a table.
func tabledRange() string {
	lo, hi := -1, -1
	for _, r := range tables {
		n := number(strings.TrimPrefix(r.release, "go1."))
		if n < 0 {
			continue
		}
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	if lo < 0 {
		return "no release"
	}
	return fmt.Sprintf("go1.%d to go1.%d", lo, hi)
}
