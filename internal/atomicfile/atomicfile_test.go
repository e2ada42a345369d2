package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-db/cairn/internal/atomicfile"
	"github.com/stretchr/testify/require"
)

// Write creates the directory, replaces the content whole, sets the mode and
// leaves no temporary file behind; a failed write leaves the old content.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f.json")
	require.NoError(t, atomicfile.Write(path, []byte("one"), 0o600))
	require.NoError(t, atomicfile.Write(path, []byte("two, longer"), 0o600))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "two, longer", string(got))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left: %v", entries)

	// A target that is a directory cannot be replaced: the error is
	// returned and nothing else changes.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.Error(t, atomicfile.Write(filepath.Join(dir, "d"), []byte("x"), 0o644))
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left: %v", entries)
}
