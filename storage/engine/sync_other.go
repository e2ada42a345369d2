//go:build !linux

package engine

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

func fdatasync(f *os.File) error { return f.Sync() }

// ErrDirInUse: another engine (another process) has the log directory open.
var ErrDirInUse = errors.New("engine: data directory in use by another process")

// lockDir only creates dir/LOCK: elsewhere than Linux the directory is not
// locked.
func lockDir(dir string, _ time.Duration) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
}
