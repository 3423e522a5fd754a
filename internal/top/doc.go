// Package top implements "gosleuth top": a live process and thread monitor
// built on the proc package, with an interactive terminal view, a one-shot
// table and an NDJSON stream.
//
// The view (rows, sorting, filtering, tree) is separate from the terminal, so
// it is tested without one.
package top
