package engine

import "syscall"

// releaseMapped tells the kernel the mapped pages in [addr, addr+n) are not
// needed: for a shared file mapping that only drops them from this
// process's page tables.
func releaseMapped(addr, n uintptr) error {
	if n == 0 {
		return nil
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, addr, n, syscall.MADV_DONTNEED); errno != 0 {
		return errno
	}
	return nil
}
