package transport

import (
	"syscall"
	"unsafe"
)

// unread returns the bytes waiting in the socket's receive queue (the
// SIOCINQ ioctl), or -1 when the socket cannot say.
func (c *tcpConn) unread() int {
	n := -1
	c.rc.Control(func(fd uintptr) {
		var v int32
		if _, _, e := syscall.RawSyscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v))); e == 0 {
			n = int(v)
		}
	})
	return n
}
