package storage

import "syscall"

// DiskUsedPct is how full the file system holding dir is, in whole percent
// of the space an unprivileged user can use (as df shows it), or 0 when it
// cannot be read.
func DiskUsedPct(dir string) int {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0
	}
	used := fs.Blocks - fs.Bfree
	total := used + fs.Bavail
	if total == 0 {
		return 0
	}
	pct := int(used * 100 / total)
	if used > 0 && pct == 0 {
		pct = 1 // 0 means unknown
	}
	return pct
}
