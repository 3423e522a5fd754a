//go:build censuscgo

package main

// #include <stdlib.h>
import "C"

// The tests build with -tags censuscgo for a patient linked with the C
// runtime.
var _ = C.abs(-1)
