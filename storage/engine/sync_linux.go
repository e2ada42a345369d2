package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// fdatasync makes a log write durable without the inode times a full fsync
// also writes.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// ErrDirInUse: another engine (another process) has the log directory open.
var ErrDirInUse = errors.New("engine: data directory in use by another process")

// lockDir takes an exclusive lock on dir/LOCK, waiting up to timeout for a
// previous process to let it go: two processes appending to one log would
// corrupt it, and one would cut the other's writes as a torn tail.
func lockDir(dir string, timeout time.Duration) (*os.File, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("engine: lock %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("%w: %s: %v", ErrDirInUse, path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
