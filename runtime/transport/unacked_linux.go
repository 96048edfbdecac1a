package transport

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h, which the syscall
// package does not name.
const tcpUserTimeout = 0x12

// closeUnackedAfter makes the kernel close tc once data it sent stays
// unacknowledged for d (TCP_USER_TIMEOUT).
func closeUnackedAfter(tc *net.TCPConn, d time.Duration) error {
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
