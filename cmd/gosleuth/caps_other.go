//go:build !linux

package main

// capsNote is empty off Linux: there are no capabilities to miss.
func capsNote(string) string { return "" }

// rootDeniedNote is empty off Linux: top's own note stands.
func rootDeniedNote() string { return "" }
