//go:build unix && !linux

package transport

import "syscall"

// Elsewhere than Linux, where system calls go through the C library,
// sockets are read and written with the syscall package's calls.

// sockRead reads from a non-blocking socket.
func sockRead(fd uintptr, p []byte) (int, syscall.Errno) { return errno(syscall.Read(int(fd), p)) }

// sockWrite writes to a non-blocking socket.
func sockWrite(fd uintptr, p []byte) (int, syscall.Errno) { return errno(syscall.Write(int(fd), p)) }

func errno(n int, err error) (int, syscall.Errno) {
	if err != nil {
		e, _ := err.(syscall.Errno)
		if e == 0 {
			e = syscall.EIO
		}
		return n, e
	}
	return n, 0
}
