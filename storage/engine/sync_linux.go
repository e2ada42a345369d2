package engine

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync makes a log write durable without the inode times a full fsync
// also writes.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
