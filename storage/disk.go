package storage

import "syscall"

// DiskUsedPct is how full the file system holding dir is, in whole percent
// of the space an unprivileged user can use (as df shows it), or 0 when it
// cannot be read.
func DiskUsedPct(dir string) int {
	return wholePct(diskUsedPercent(dir))
}

// diskUsedPercent is DiskUsedPct before it is rounded down.
func diskUsedPercent(dir string) float64 {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0
	}
	used := fs.Blocks - fs.Bfree
	total := used + fs.Bavail
	if total == 0 {
		return 0
	}
	return float64(used) * 100 / float64(total)
}

// wholePct rounds a percent down, keeping a used disk off 0 (unknown).
func wholePct(f float64) int {
	pct := int(f)
	if f > 0 && pct == 0 {
		pct = 1
	}
	return pct
}

// diskSlack is how far past its whole percent a disk's use must move before
// the node record shows the next one.
const diskSlack = 0.25

// steadyPct is the whole percent a node record shows for a disk now f
// percent full, having shown last: it moves once f is diskSlack past last's
// percent, so a disk that hovers at a boundary (76.99 <-> 77.01 as other
// writers on the file system come and go) does not make every node on it
// rewrite its record, and every watcher decode it, at each crossing.
func steadyPct(last int, f float64) int {
	if last == 0 || f < float64(last)-diskSlack || f >= float64(last+1)+diskSlack {
		return wholePct(f)
	}
	return last
}
