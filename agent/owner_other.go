//go:build !unix

package agent

import "io/fs"

func ownerOf(fs.FileInfo) (int, bool) { return 0, false }

// processExists cannot tell outside Unix: it says yes, so nothing is swept.
func processExists(int) bool { return true }
