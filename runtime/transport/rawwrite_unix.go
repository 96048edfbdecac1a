//go:build unix

package transport

import (
	"net"
	"syscall"
)

// rawWriter writes to a socket without waiting: what the socket's buffer
// takes now is written, the rest is left to the caller. It lets a Send
// write on the caller's goroutine and still never block on the network.
// Only the goroutine that holds the stream's writing turn uses it.
type rawWriter struct {
	rc  syscall.RawConn
	buf []byte
	n   int
	err error
	fn  func(fd uintptr) bool // writeFD, bound once: a method value per write would allocate
}

// newRawWriter returns nil for a conn without a file descriptor of its
// own to write to (TLS, pipes).
func newRawWriter(nc net.Conn) *rawWriter {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &rawWriter{rc: rc}
	w.fn = w.writeFD
	return w
}

// write writes as much of b as the socket takes without waiting. A nil
// writer writes nothing.
func (w *rawWriter) write(b []byte) (int, error) {
	if w == nil {
		return 0, nil
	}
	w.buf, w.n, w.err = b, 0, nil
	err := w.rc.Write(w.fn)
	n := w.n
	if w.err != nil {
		err = w.err
	}
	w.buf, w.err = nil, nil
	return n, err
}

// writeFD always reports done: RawConn.Write would otherwise wait for the
// socket to become writable.
func (w *rawWriter) writeFD(fd uintptr) bool {
	for w.n < len(w.buf) {
		m, err := syscall.Write(int(fd), w.buf[w.n:])
		if m > 0 {
			w.n += m
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			w.err = err
			return true
		case m <= 0:
			return true
		}
	}
	return true
}
