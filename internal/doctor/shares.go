package doctor

import (
	"cmp"
	"slices"
)

// sortShares orders shares largest first, then by name.
func sortShares(s []Share) {
	slices.SortFunc(s, func(a, b Share) int {
		if c := cmp.Compare(b.Share, a.Share); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}
