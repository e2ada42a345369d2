//go:build !linux

package engine

// releaseMapped is a no-op where madvise is not wired up.
func releaseMapped(_, _ uintptr) error { return nil }
