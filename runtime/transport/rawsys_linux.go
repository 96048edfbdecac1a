package transport

import (
	"syscall"
	"unsafe"
)

// On Linux, sockets are read and written with system calls that skip the
// Go scheduler's bookkeeping for calls that may block (syscall.RawSyscall):
// Go's sockets are non-blocking, so a read or write returns at once, and
// waiting for the socket still goes through the network poller. The
// bookkeeping is not free on a request/response connection: a process
// that went idle between two calls lets the runtime's monitor thread
// sleep, and the first blocking-style system call after that wakes it
// again, so every call paid one more thread wake-up on each side. With two
// CPUs that was about a third of a quick call's context switches.

// sockRead reads from a non-blocking socket.
func sockRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// sockWrite writes to a non-blocking socket.
func sockWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}
