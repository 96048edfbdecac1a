package transport

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// shedder closes connections the node will not take straight from the
// listening socket: accept4 and close, with no net.Conn, no registration
// with the poller and no socket options, which are most of what accepting
// costs. A storm the node sheds then costs it two system calls a
// connection. It has no lock: the accept loop owns it.
type shedder struct {
	rc syscall.RawConn
	// The arguments and result of one drain; fn is bound once, as a
	// method value made per call would allocate.
	take   func() bool
	refuse func(addr string)
	slot   bool
	fn     func(fd uintptr)
	// tell, if set, takes a shed connection's descriptor to tell its
	// dialer that the node is at its limit, and reports whether it took
	// it; it declines past a bound, and the connection is closed as is.
	tell func(fd int) bool
}

// newShedder returns a shedder for nl, or nil where nl is no TCP listener;
// tell is its tell.
func newShedder(nl net.Listener, tell func(fd int) bool) *shedder {
	tl, ok := nl.(*net.TCPListener)
	if !ok {
		return nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	s := &shedder{rc: rc, tell: tell}
	s.fn = s.drainFD
	return s
}

// drain sheds the connections waiting in the backlog, passing each one's
// address to refuse, until take gets a handshake slot, which it reports,
// or none is left. It does not wait for connections: Accept does, and
// takes what comes then.
func (s *shedder) drain(take func() bool, refuse func(addr string)) bool {
	s.take, s.refuse, s.slot = take, refuse, false
	s.rc.Control(s.fn)
	s.take, s.refuse = nil, nil
	return s.slot
}

func (s *shedder) drainFD(fd uintptr) {
	for {
		if s.take() {
			s.slot = true
			return
		}
		nfd, sa, err := syscall.Accept4(int(fd), syscall.SOCK_CLOEXEC)
		switch {
		case errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ECONNABORTED):
			continue
		case err != nil:
			// EAGAIN: the backlog is empty. Anything else, such as
			// running out of descriptors, Accept meets too and
			// handles.
			return
		}
		if s.tell == nil || !s.tell(nfd) {
			syscall.Close(nfd)
		}
		s.refuse(sockaddrString(sa))
	}
}

func sockaddrString(sa syscall.Sockaddr) string {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return "unknown"
}

// tellFDInPassing writes hello, which says the node is at its limit, to
// fd, a connection the shedder took from the backlog, and reads what its
// dialer sent already, if anything, without waiting: closing it with
// bytes unread would reset the connection (see tellInPassing). The
// caller closes fd.
func tellFDInPassing(fd int, hello []byte) {
	syscall.Write(fd, hello) // a fresh connection's send buffer takes it at once
	drainFD(fd)
}

// tellConnInPassing is tellFDInPassing for an accepted connection, on its
// descriptor: a write deadline could pass while the accept loop waits
// for a CPU, and leave the dialer without the Hello. It reports whether
// it could.
func tellConnInPassing(nc net.Conn, hello []byte) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Write(func(fd uintptr) bool {
		tellFDInPassing(int(fd), hello)
		return true
	}) == nil
}

// drainFD reads what fd holds, if anything, without waiting.
func drainFD(fd int) {
	var buf [512]byte
	syscall.Recvfrom(fd, buf[:], syscall.MSG_DONTWAIT)
}
