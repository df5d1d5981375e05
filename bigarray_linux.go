package dmutex

import "syscall"

// mapBytes maps n bytes of anonymous private memory, reserved without
// swap (MAP_NORESERVE): the kernel gives a page when it is first written.
func mapBytes(n int) ([]byte, bool) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, false
	}
	return b, true
}

// unmapBytes undoes a mapping of mapBytes's.
func unmapBytes(b []byte) { _ = syscall.Munmap(b) }
