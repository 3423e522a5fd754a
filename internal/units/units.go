// Package units formats quantities for people, one way for every view, so
// an RSS reads the same in top, doctor, inspect and load.
package units

import (
	"fmt"
	"strconv"
)

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

// Count prints a count (or a rate) with a decimal letter: "950", "12.5k",
// "1.23M", "4.56G". Below 10,000 it prints the whole number.
func Count(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.2fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// Plural prints a whole count with its noun, singular for one: "1 thread",
// "12 threads". The noun takes an s for the plural (every noun the views
// count: thread, process, CPU, sample, goroutine, call).
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if noun == "process" {
		return strconv.Itoa(n) + " processes"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
