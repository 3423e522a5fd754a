// Package units formats quantities for people, one way for every view, so
// an RSS reads the same in top, doctor, inspect and load.
package units

import "strconv"

// Bytes prints a byte count in binary units with one letter, as top and
// ps do: "512" (bytes), "12.3M", "123M", "1.5G". Below 10 of a unit it
// keeps one decimal.
func Bytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10)
	}
	f := float64(n)
	for _, s := range []string{"K", "M", "G", "T", "P"} {
		f /= unit
		if f < unit-0.5 || s == "P" {
			if f < 9.95 {
				return strconv.FormatFloat(f, 'f', 1, 64) + s
			}
			return strconv.FormatFloat(f, 'f', 0, 64) + s
		}
	}
	return ""
}
