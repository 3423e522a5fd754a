//go:build refcgo

package main

// #include <stdlib.h>
import "C"

// The tests build with -tags refcgo for a program linked with the C
// runtime (runtime/cgo, external thread creation).
var _ = C.abs(-1)
