package transport

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// readBufferSize is the per-connection read buffer. Frames that fit are
	// decoded in place; larger ones are read into a separate buffer.
	readBufferSize = 64 << 10
	// maxRetainedBuffer bounds the buffers a connection keeps between uses,
	// so one large burst or frame does not pin memory for its whole life.
	maxRetainedBuffer = 1 << 20
	// closeFlushTimeout bounds how long Close waits to flush queued frames
	// to a peer that does not read.
	closeFlushTimeout = time.Second
)

// frameReader reads length-prefixed frames from a byte stream. The slice
// next returns is valid until the following call, which lets one buffer
// serve every frame: handlers must copy what they keep.
type frameReader struct {
	br      *bufio.Reader
	max     int
	big     []byte // for frames larger than br's buffer
	consume int    // bytes of the last frame still to discard from br
}

func newFrameReader(r io.Reader, max int) *frameReader {
	return &frameReader{br: bufio.NewReaderSize(r, readBufferSize), max: max}
}

// next returns the next frame without its length prefix. The length is
// checked against the limit before anything is read or allocated for the
// body, so a forged prefix costs nothing. A stream that ends exactly between
// frames gives io.EOF; one that ends inside a frame, io.ErrUnexpectedEOF.
func (r *frameReader) next() ([]byte, error) {
	if r.consume > 0 {
		r.br.Discard(r.consume) // cannot fail: the bytes were peeked
		r.consume = 0
	}
	if cap(r.big) > maxRetainedBuffer {
		r.big = nil // a rare huge frame should not pin memory
	}
	hdr, err := r.br.Peek(4)
	if err != nil {
		if err == io.EOF && len(hdr) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	n, err := FrameLen(hdr, r.max)
	if err != nil {
		return nil, err
	}
	r.br.Discard(4)
	if n <= r.br.Size() {
		p, err := r.br.Peek(n)
		if err != nil {
			return nil, unexpectedEOF(err)
		}
		r.consume = n
		return p, nil
	}
	if cap(r.big) < n {
		r.big = make([]byte, n)
	}
	p := r.big[:n]
	if _, err := io.ReadFull(r.br, p); err != nil {
		return nil, unexpectedEOF(err)
	}
	return p, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// isProtocolError reports whether err means the peer sent bytes that are
// not a valid frame, as opposed to the connection failing.
func isProtocolError(err error) bool {
	return errors.Is(err, ErrMalformedFrame) || errors.Is(err, ErrBadVersion) ||
		errors.Is(err, ErrUnknownType) || errors.Is(err, ErrFrameTooLarge)
}

// handshake exchanges Hello frames on nc within timeout and returns the
// peer's Hello and the reader to continue with (it may already hold frames
// the peer sent right after its Hello). Both sides write before reading, so
// the write runs beside the read: on an unbuffered conn neither would finish
// alone.
func handshake(nc net.Conn, cfg Config, timeout time.Duration) (Hello, *frameReader, error) {
	if timeout > 0 {
		if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
			return Hello{}, nil, err
		}
	}
	out, err := AppendFrame(nil, &Hello{Version: Version, Node: cfg.Node, Group: cfg.Group}, cfg.MaxFrameSize)
	if err != nil {
		return Hello{}, nil, err
	}
	written := make(chan error, 1)
	go func() {
		_, err := nc.Write(out)
		written <- err
	}()

	fr := newFrameReader(nc, cfg.MaxFrameSize)
	peer, rerr := readHello(fr)
	if rerr != nil {
		// Unblock the writer before waiting for it.
		nc.SetDeadline(time.Unix(1, 0))
	}
	werr := <-written
	switch {
	case rerr != nil:
		return Hello{}, nil, rerr
	case werr != nil:
		return Hello{}, nil, werr
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return Hello{}, nil, err
	}
	return peer, fr, nil
}

func readHello(fr *frameReader) (Hello, error) {
	p, err := fr.next()
	if err != nil {
		return Hello{}, err
	}
	f, err := Decode(p)
	if err != nil {
		return Hello{}, err
	}
	h, ok := f.(*Hello)
	if !ok {
		return Hello{}, fmt.Errorf("%w: first frame is %s, want hello", ErrMalformedFrame, f.Type())
	}
	if h.Version < Version {
		return Hello{}, fmt.Errorf("%w: peer %q speaks up to version %d, this node needs %d", ErrBadVersion, h.Node, h.Version, Version)
	}
	return *h, nil
}

// stream is a Conn over a net.Conn after the Hello exchange. One goroutine
// reads and dispatches frames in order; another writes: Send appends encoded
// frames to a pending buffer, and the writer swaps it for a spare one and
// writes it whole, so frames queued while a write is in progress leave in
// the next single write.
type stream struct {
	nc   net.Conn
	fr   *frameReader
	h    Handler
	peer Hello
	cfg  Config
	desc string // peer name and address, for errors and logs

	mu        sync.Mutex
	pending   []byte // frames waiting for the writer
	spare     []byte // the writer's last buffer, ready to become pending
	closing   bool   // no more Sends; the writer flushes and exits
	broken    bool   // the connection failed: the writer exits without flushing
	reason    error  // why the connection ended; set once, with reasonSet
	reasonSet bool

	wake       chan struct{} // capacity 1: "pending has data or state changed"
	writerDone chan struct{}
	readerDone chan struct{}

	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	writes, queueFull          atomic.Uint64
}

var _ StatsConn = (*stream)(nil)

// newStream starts the read and write loops of a connection whose Hello
// exchange is done. cfg must have its defaults applied.
func newStream(nc net.Conn, fr *frameReader, peer Hello, cfg Config, h Handler) *stream {
	s := &stream{
		nc:         nc,
		fr:         fr,
		h:          h,
		peer:       peer,
		cfg:        cfg,
		desc:       fmt.Sprintf("%q at %s", peer.Node, nc.RemoteAddr()),
		wake:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	go s.writeLoop()
	go s.readLoop()
	return s
}

// Peer returns the Hello the peer sent.
func (s *stream) Peer() Hello { return s.peer }

// Send queues f for writing. It fails with ErrQueueFull when the queue
// already holds SendQueueBytes, with ErrClosed after the connection ended,
// and with ErrFrameTooLarge for a frame over MaxFrameSize.
func (s *stream) Send(f Frame) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return s.closedError()
	}
	start := len(s.pending)
	b, err := AppendFrame(s.pending, f, s.cfg.MaxFrameSize)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	// An empty queue takes any frame, so a frame larger than the queue
	// bound can still be sent.
	if start > 0 && len(b) > s.cfg.SendQueueBytes {
		s.pending = b[:start]
		s.mu.Unlock()
		s.queueFull.Add(1)
		return fmt.Errorf("%w: %d bytes queued to %s, limit %d", ErrQueueFull, start, s.desc, s.cfg.SendQueueBytes)
	}
	s.pending = b
	s.mu.Unlock()
	s.framesSent.Add(1)
	if start == 0 {
		s.signal()
	}
	return nil
}

func (s *stream) closedError() error {
	s.mu.Lock()
	reason := s.reason
	s.mu.Unlock()
	if reason != nil {
		return fmt.Errorf("%w: to %s: %w", ErrClosed, s.desc, reason)
	}
	return fmt.Errorf("%w: to %s", ErrClosed, s.desc)
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close flushes queued frames (waiting at most closeFlushTimeout for a peer
// that does not read) and closes the connection. The handler's HandleClose
// gets a nil error unless the connection had already failed.
func (s *stream) Close() error {
	s.mu.Lock()
	first := !s.closing
	if first {
		s.closing = true
		s.setReasonLocked(nil)
	}
	s.mu.Unlock()
	if first {
		s.nc.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		s.signal()
	}
	<-s.writerDone
	return nil
}

func (s *stream) setReasonLocked(err error) {
	if !s.reasonSet {
		s.reason, s.reasonSet = err, true
	}
}

// fail ends the connection at once, without flushing, recording err as the
// reason unless one is already recorded.
func (s *stream) fail(err error) {
	s.mu.Lock()
	s.setReasonLocked(err)
	s.closing, s.broken = true, true
	s.mu.Unlock()
	s.nc.Close()
	s.signal()
}

// Stats reports what the connection has done so far.
func (s *stream) Stats() Stats {
	return Stats{
		FramesSent:     s.framesSent.Load(),
		FramesReceived: s.framesReceived.Load(),
		BytesSent:      s.bytesSent.Load(),
		BytesReceived:  s.bytesReceived.Load(),
		Writes:         s.writes.Load(),
		QueueFull:      s.queueFull.Load(),
	}
}

func (s *stream) writeLoop() {
	defer close(s.writerDone)
	defer s.nc.Close()
	for range s.wake {
		s.mu.Lock()
		buf := s.pending
		s.pending, s.spare = s.spare[:0], nil
		closing, broken := s.closing, s.broken
		s.mu.Unlock()
		if broken {
			return
		}
		if len(buf) > 0 {
			n, err := s.nc.Write(buf)
			s.writes.Add(1)
			s.bytesSent.Add(uint64(n))
			if err != nil {
				s.fail(fmt.Errorf("%w: writing to %s: %w", ErrClosed, s.desc, err))
				return
			}
		}
		if closing {
			return
		}
		if cap(buf) > maxRetainedBuffer {
			buf = nil
		}
		s.mu.Lock()
		s.spare = buf[:0]
		s.mu.Unlock()
	}
}

func (s *stream) readLoop() {
	defer close(s.readerDone)
	var d Decoder
	var err error
	for {
		var p []byte
		if p, err = s.fr.next(); err != nil {
			break
		}
		var f Frame
		if f, err = d.Decode(p); err != nil {
			break
		}
		if f.Type() == TypeHello {
			err = fmt.Errorf("%w: hello after the handshake", ErrMalformedFrame)
			break
		}
		s.framesReceived.Add(1)
		s.bytesReceived.Add(uint64(len(p) + 4))
		s.h.HandleFrame(s, f)
	}
	s.h.HandleClose(s, s.readFailed(err))
}

// readFailed ends the connection after the read loop stopped with err and
// returns the reason to give the handler: nil after a local Close, else the
// first failure.
func (s *stream) readFailed(err error) error {
	s.mu.Lock()
	local := s.reasonSet && s.reason == nil
	s.mu.Unlock()
	if local {
		// Close is flushing; the read failed because the socket closed.
		<-s.writerDone
		return nil
	}
	log := s.cfg.Logger.With("peer", s.peer.Node, "addr", s.nc.RemoteAddr().String())
	switch {
	case isProtocolError(err):
		err = fmt.Errorf("from %s: %w", s.desc, err)
		log.Warn("transport: closing connection after a bad frame", "err", err)
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("%w: %s closed the connection", ErrClosed, s.desc)
		log.Debug("transport: peer closed the connection")
	case errors.Is(err, syscall.ECONNRESET):
		err = fmt.Errorf("%w: reading from %s: %w", ErrReset, s.desc, err)
		log.Info("transport: connection reset", "err", err)
	default:
		err = fmt.Errorf("%w: reading from %s: %w", ErrClosed, s.desc, err)
		log.Info("transport: connection lost", "err", err)
	}
	s.fail(err)
	<-s.writerDone
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}
