package allocview

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/gosleuth/gosleuth/internal/gomem"
)

// sourceDir finds the directory of the program's main package from the
// sites' file paths, where one exists on this machine.
func sourceDir(sites []gomem.Site, top []Site) string {
	var frames []gomem.Frame
	for _, s := range sites {
		frames = append(frames, s.Stack...)
	}
	for _, s := range top {
		frames = append(frames, s.Stack...)
	}
	for _, fr := range frames {
		if !strings.HasPrefix(fr.Func, "main.") || !filepath.IsAbs(fr.File) {
			continue
		}
		if _, err := os.Stat(fr.File); err == nil {
			return filepath.Dir(fr.File)
		}
	}
	return ""
}
