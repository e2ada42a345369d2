package master_test

import (
	"os"
	"testing"

	"github.com/cairn-db/cairn/internal/verify"
)

// TestMain runs every test with the in-process invariant checks on.
func TestMain(m *testing.M) {
	_ = os.Setenv(verify.Env, "1")
	os.Exit(m.Run())
}
