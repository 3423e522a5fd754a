package probe

import (
	"os"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}
