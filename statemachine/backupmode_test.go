package statemachine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestStateBackupPrivate (issue 26 #7): the local state backup is readable
// by its owner only, also when it replaces a file an older version wrote
// world-readable.
func TestStateBackupPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.backup")
	require.NoError(t, os.WriteFile(path, []byte("{}"), 0o644))
	require.NoError(t, statemachine.WriteFileAtomic(path, map[string]int{"a": 1}))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}
