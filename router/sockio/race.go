//go:build linux && race

package sockio

import "syscall"

// Under the race detector the calls go through the syscall package, whose
// Read and Write tell the detector that bytes written to a socket happen
// before their reading, as programs (and tests) rely on. The raw calls
// would hide that order and make it report races that are not there.

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errnoOf(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
