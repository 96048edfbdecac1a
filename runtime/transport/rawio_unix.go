//go:build unix

package transport

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// tcpConn is a TCP connection whose Read and Write use sockRead and
// sockWrite (rawsys_*.go); everything else is the *net.TCPConn's. Reads
// and writes wait for the socket, and honour deadlines, as net.Conn's do,
// and like them may be called from several goroutines at once: each
// direction has one read or write in progress at a time, as the socket's
// own locks allow.
type tcpConn struct {
	*net.TCPConn
	rc   syscall.RawConn
	rdMu sync.Mutex
	rd   rawIO // guarded by rdMu
	wrMu sync.Mutex
	wr   rawIO // guarded by wrMu
}

// rawIO is one read or write in progress; fn is its step, bound once (a
// method value per call would allocate), for syscall.RawConn to call until
// it reports done.
type rawIO struct {
	p     []byte
	n     int
	err   syscall.Errno
	now   bool // a write that takes what the socket takes now, and no more
	stuck bool // a write took nothing and reported no error
	fn    func(fd uintptr) bool
}

// wrapTCP returns nc as a tcpConn if it is a TCP connection, else nc.
func wrapTCP(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &tcpConn{TCPConn: tc, rc: rc}
	c.rd.fn = c.readFD
	c.wr.fn = c.writeFD
	return c
}

func (c *tcpConn) readFD(fd uintptr) bool {
	for {
		n, e := sockRead(fd, c.rd.p)
		switch e {
		case 0:
			c.rd.n = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until the socket is readable
		default:
			c.rd.err = e
			return true
		}
	}
}

func (c *tcpConn) writeFD(fd uintptr) bool {
	for c.wr.n < len(c.wr.p) {
		n, e := sockWrite(fd, c.wr.p[c.wr.n:])
		switch e {
		case 0:
			if n <= 0 {
				c.wr.stuck = true
				return true
			}
			c.wr.n += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return c.wr.now // else wait until the socket is writable
		default:
			c.wr.err = e
			return true
		}
	}
	return true
}

// Read implements net.Conn.
func (c *tcpConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rdMu.Lock()
	c.rd.p, c.rd.n, c.rd.err = p, 0, 0
	err := c.rc.Read(c.rd.fn)
	n, e := c.rd.n, c.rd.err
	c.rd.p = nil
	c.rdMu.Unlock()
	switch {
	case e != 0:
		return 0, c.opError("read", os.NewSyscallError("read", e))
	case err != nil:
		return 0, c.opError("read", err)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write implements net.Conn.
func (c *tcpConn) Write(p []byte) (int, error) { return c.write(p, false) }

// writeNow writes as much of p as the socket takes without waiting, and
// leaves the rest to the caller: it lets a Send write on the caller's
// goroutine and still never block on the network. A nil conn writes
// nothing.
func (c *tcpConn) writeNow(p []byte) (int, error) {
	if c == nil {
		return 0, nil
	}
	return c.write(p, true)
}

func (c *tcpConn) write(p []byte, now bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wrMu.Lock()
	c.wr.p, c.wr.n, c.wr.err, c.wr.now, c.wr.stuck = p, 0, 0, now, false
	err := c.rc.Write(c.wr.fn)
	n, e, stuck := c.wr.n, c.wr.err, c.wr.stuck
	c.wr.p = nil
	c.wrMu.Unlock()
	switch {
	case stuck:
		return n, c.opError("write", io.ErrUnexpectedEOF)
	case e != 0:
		return n, c.opError("write", os.NewSyscallError("write", e))
	case err != nil:
		return n, c.opError("write", err)
	}
	return n, nil
}

// rawTCP returns nc if it is a tcpConn (plain TCP, not TLS), else nil.
func rawTCP(nc net.Conn) *tcpConn {
	c, _ := nc.(*tcpConn)
	return c
}

// opError names op the way net.Conn's errors do, rather than the
// "raw-read" of syscall.RawConn: errors.Is sees the same causes
// (os.ErrDeadlineExceeded, net.ErrClosed, syscall.ECONNRESET).
func (c *tcpConn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
