package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"
)

const (
	// initialReadBuffer is what a connection's reader starts with: enough
	// for a Hello and the frames of a call with a small payload. A
	// connection that sends nothing costs no more; one that sends more
	// grows the buffer as it fills.
	initialReadBuffer = 256
	// baseReadBuffer is what a reader may grow to for small frames and
	// batches of them without charging the node's buffer budget, and what
	// it shrinks back to once a larger frame has been handled.
	baseReadBuffer = 16 << 10
	// maxRetainedBuffer bounds the write buffer a connection keeps between
	// uses, so one large burst does not pin memory for its whole life.
	maxRetainedBuffer = 1 << 20
	// closeFlushTimeout bounds how long Close waits to flush queued frames
	// to a peer that does not read.
	closeFlushTimeout = time.Second
)

// frameReader reads length-prefixed frames from a byte stream. The slice
// next returns is valid until the following call, which lets one buffer
// serve every frame: handlers must copy what they keep.
//
// Memory follows the bytes that arrived, never the length a peer announced.
// Frames up to baseReadBuffer go through a buffer that starts small and
// grows to that base. A larger frame is gathered in chunks as its bytes
// arrive and copied once into a buffer of its exact size when complete: a
// stalled frame holds only what came, and growing one leaves no garbage
// behind. The node's budget, though, is charged for the whole frame as
// soon as its length is read, before any of the body: twice the length,
// once for the chunks and once for the buffer they are copied into. A
// frame the node could not finish is refused before it costs reading.
// Charged per chunk instead, frames that could never all finish were read
// in part and dropped, each drop freeing budget for another to read
// further, and a stalled attack made the node read 160 MB to hold 32. The
// charge is handed back at the next frame.
type frameReader struct {
	rd      io.Reader
	max     int
	g       *guard // nil: no node-wide budget
	buf     []byte // len(buf) is the buffer's size; [r:w] is unread
	r, w    int
	consume int      // bytes of the last frame to skip on the next call
	chunks  [][]byte // a large frame in progress
	big     []byte   // the last large frame, until the next call
	charged int64    // bytes reserved from g
	claim   int64    // of charged, what the frame in progress reserved and its chunks have not used
	err     error    // a read error held back until the buffered bytes are used
	// wide is set when a read filled all free space: the peer is sending
	// batches, and a larger buffer saves read calls.
	wide bool

	// Deadlines, once armed (after the handshake, which sets its own).
	nc           net.Conn
	frameTimeout time.Duration
	idleTimeout  time.Duration                     // <= 0: none
	idleCheck    func(time.Time) (time.Time, bool) // whether to keep waiting, and until when, given the last receive
	frameStart   time.Time                         // when the frame in progress was first waited for
	deadline     time.Time                         // the read deadline currently set
	lastRecv     time.Time

	// Set while a caller waiting for its answer reads (callerread.go):
	// reads return errWake at until or once stop is set, and a large
	// frame is left for a read goroutine.
	until time.Time
	stop  *atomic.Bool
}

// Large frames are gathered in chunks of minChunk to chunkSize bytes.
const (
	minChunk  = 4 << 10
	chunkSize = 64 << 10
)

func newFrameReader(r io.Reader, max int, g *guard) *frameReader {
	return &frameReader{rd: r, max: max, g: g, buf: make([]byte, initialReadBuffer)}
}

// arm makes the reader enforce the frame timeout and, if idle > 0, call
// check when no frame arrived for idle; check returns false to end the
// connection with ErrIdle, or the new idle deadline.
func (r *frameReader) arm(nc net.Conn, frame, idle time.Duration, check func(lastRecv time.Time) (time.Time, bool)) {
	r.nc, r.frameTimeout, r.idleTimeout, r.idleCheck = nc, frame, idle, check
	r.lastRecv = time.Now()
}

// next returns the next frame without its length prefix. The length is
// checked against the limit before anything is read for the body. A
// stream that ends exactly between frames gives io.EOF; one that ends
// inside a frame, io.ErrUnexpectedEOF.
func (r *frameReader) next() ([]byte, error) {
	if r.consume > 0 || r.big != nil {
		// The last frame is done; a frame a caller stopped waiting for
		// halfway keeps the time it started.
		r.frameStart = time.Time{}
	}
	r.r += r.consume
	r.consume = 0
	r.release()
	if r.r == r.w {
		r.r, r.w = 0, 0
	}
	for r.w-r.r < 4 {
		if err := r.fill(); err != nil {
			if err == io.EOF && r.w > r.r {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	n, err := FrameLen(r.buf[r.r:r.w], r.max)
	if err != nil {
		return nil, err
	}
	need := 4 + n
	if need > baseReadBuffer {
		if r.stop != nil {
			return nil, errLarge
		}
		return r.large(need)
	}
	for r.w-r.r < need {
		if err := r.fill(); err != nil {
			return nil, unexpectedEOF(err)
		}
	}
	r.consume = need
	return r.buf[r.r+4 : r.r+need], nil
}

// fill reads at least one more byte into the buffer, making room first:
// unread bytes move to the front, and a full buffer, or one a batch
// filled, grows towards baseReadBuffer.
func (r *frameReader) fill() error {
	if r.err != nil {
		return r.err
	}
	if r.r > 0 {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	if len(r.buf) < baseReadBuffer && (r.w == len(r.buf) || r.wide) {
		b := make([]byte, min(2*len(r.buf), baseReadBuffer))
		copy(b, r.buf[:r.w])
		r.buf = b
	}
	free := len(r.buf) - r.w
	n, err := r.read(r.buf[r.w:], r.w, 0)
	r.w += n
	r.wide = n == free
	return err
}

// large gathers a frame of need bytes (prefix included) that is bigger than
// the base buffer, which holds its first bytes.
func (r *frameReader) large(need int) ([]byte, error) {
	if !r.reserve(2 * int64(need)) {
		return nil, r.overloaded(2*need, need)
	}
	r.claim = int64(need)
	got := r.w - r.r
	if err := r.addChunk(got, need); err != nil {
		return nil, err
	}
	r.chunks[0] = append(r.chunks[0], r.buf[r.r:r.w]...)
	r.r, r.w = 0, 0
	for got < need {
		last := r.chunks[len(r.chunks)-1]
		if len(last) == cap(last) {
			if err := r.addChunk(got, need-got); err != nil {
				return nil, err
			}
			last = r.chunks[len(r.chunks)-1]
		}
		n, err := r.read(last[len(last):min(cap(last), len(last)+need-got)], got, need)
		r.chunks[len(r.chunks)-1] = last[:len(last)+n]
		got += n
		if err != nil && got < need {
			return nil, unexpectedEOF(err)
		}
	}
	r.big = make([]byte, 0, need)
	for _, c := range r.chunks {
		r.big = append(r.big, c...)
	}
	r.dropChunks()
	r.unreserve(r.claim) // the copy holds what the chunks did not use
	r.claim = 0
	return r.big[4:], nil
}

// addChunk starts a new chunk for at most left more bytes, out of what the
// frame reserved; a chunk rounded up past it charges the node the rest.
// Chunks double with what arrived, from minChunk to chunkSize, so a frame
// never holds much more than twice its bytes so far.
func (r *frameReader) addChunk(got, left int) error {
	class := chunkClass(min(chunkSize, left, max(minChunk, got)))
	size := int64(minChunk << class)
	if over := size - r.claim; over > 0 {
		if !r.reserve(over) {
			return r.overloaded(int(over), 0)
		}
		r.claim = 0
	} else {
		r.claim -= size
	}
	r.chunks = append(r.chunks, getChunk(class))
	return nil
}

// chunkPools recycle chunks by size class (minChunk << class), so that
// connections an attack opens and the node closes leave no garbage for
// the next ones to add to: the heap stays near what is in use.
var chunkPools [5]sync.Pool

// chunkClass is the smallest class that holds n bytes.
func chunkClass(n int) int {
	c := 0
	for minChunk<<c < n && c < len(chunkPools)-1 {
		c++
	}
	return c
}

func getChunk(class int) []byte {
	if p, ok := chunkPools[class].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, minChunk<<class)
}

func putChunk(b []byte) {
	class := chunkClass(cap(b))
	if minChunk<<class == cap(b) {
		chunkPools[class].Put(&b)
	}
}

// overloaded is the error for a frame the budget cannot hold: more bytes
// for its chunks, or, frame > 0, the charge for a frame of that size
// (prefix included) whose body was not read.
func (r *frameReader) overloaded(more, frame int) error {
	what := "a large frame needs"
	if frame > 0 {
		what = fmt.Sprintf("a %d-byte frame, charged twice its length while it is read, needs", frame-4)
	}
	return fmt.Errorf("%w: %s %d more buffer bytes, the node holds %d of %d (TCPConfig.MaxBufferedBytes)",
		ErrOverloaded, what, more, r.g.buffered.Load(), r.g.maxBuffered)
}

func (r *frameReader) reserve(n int64) bool {
	if r.g != nil && !r.g.reserve(n) {
		return false
	}
	r.charged += n
	return true
}

// unreserve hands n charged bytes back to the node.
func (r *frameReader) unreserve(n int64) {
	r.charged -= n
	if r.g != nil {
		r.g.unreserve(n)
	}
}

func (r *frameReader) dropChunks() {
	var n int64
	for _, c := range r.chunks {
		n += int64(cap(c))
		putChunk(c)
	}
	clear(r.chunks)
	r.chunks = r.chunks[:0]
	r.unreserve(n)
}

// read reads into p, which must not be empty, under the deadline that
// applies: the frame timeout when have bytes of a frame (of need, 0 if
// not known yet) are here, the idle timeout when none are.
func (r *frameReader) read(p []byte, have, need int) (int, error) {
	armed := false
	for {
		if r.nc != nil && !armed {
			if err := r.setDeadline(have > 0); err != nil {
				return 0, err
			}
		}
		if r.stop != nil && r.stop.Load() {
			return 0, errWake
		}
		n, err := r.rd.Read(p)
		if n > 0 {
			if r.nc != nil {
				r.lastRecv = time.Now()
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				r.err = err
			}
			return n, nil
		}
		if err == nil {
			continue
		}
		if r.nc != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			now := time.Now()
			if r.stop != nil && (r.stop.Load() || !now.Before(r.until)) {
				return 0, errWake
			}
			if r.deadline.IsZero() || now.Before(r.deadline) {
				// Not this reader's deadline: an interruption meant
				// for a caller that has stopped reading.
				r.deadline, armed = stale, false
				continue
			}
			if have > 0 {
				if need == 0 {
					return 0, fmt.Errorf("%w: %d bytes of a frame header after %v", ErrFrameTimeout, have, r.frameTimeout)
				}
				return 0, fmt.Errorf("%w: %d of %d bytes after %v", ErrFrameTimeout, have, need, r.frameTimeout)
			}
			if until, busy := r.idleCheck(r.lastRecv); busy {
				r.deadline, armed = until, true
				if err := r.nc.SetReadDeadline(until); err != nil {
					return 0, err
				}
				continue
			}
			return 0, fmt.Errorf("%w: no frame for %v", ErrIdle, time.Since(r.lastRecv).Round(time.Second))
		}
		return 0, err
	}
}

// setDeadline arms the frame timeout when part of a frame is here and the
// idle timeout when none is, or a reading caller's own deadline if that is
// sooner. The idle deadline is moved only when it has come within half the
// timeout, so a busy connection does not pay for a deadline change on
// every read; when it fires early, idleCheck decides.
func (r *frameReader) setDeadline(mid bool) error {
	var dl time.Time
	switch {
	case mid:
		if r.frameStart.IsZero() {
			r.frameStart = time.Now()
		}
		dl = r.frameStart.Add(r.frameTimeout)
	case r.idleTimeout > 0:
		now := time.Now()
		if left := r.deadline.Sub(now); r.stop == nil && !r.deadline.IsZero() && left > r.idleTimeout/2 && left <= r.idleTimeout {
			return nil
		}
		dl = now.Add(r.idleTimeout)
	}
	if r.stop != nil && (dl.IsZero() || r.until.Before(dl)) {
		dl = r.until
	}
	if dl.Equal(r.deadline) {
		return nil
	}
	r.deadline = dl
	return r.nc.SetReadDeadline(dl)
}

// stale marks the read deadline as unknown: the next read sets its own.
var stale = time.Unix(1, 0)

// release hands back what the last large frame held.
func (r *frameReader) release() {
	r.dropChunks()
	r.big = nil
	r.unreserve(r.charged)
	r.claim = 0
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
// alone. g, if not nil, is charged for the reader's buffer.
func handshake(nc net.Conn, cfg Config, timeout time.Duration, g *guard) (Hello, *frameReader, error) {
	if timeout > 0 {
		if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
			return Hello{}, nil, err
		}
	}
	out, err := AppendFrame(nil, &Hello{Version: Version, Node: cfg.Node, Group: cfg.Group, MaxFrame: uint32(cfg.MaxFrameSize), Revision: Revision, Caps: Caps}, cfg.MaxFrameSize)
	if err != nil {
		return Hello{}, nil, err
	}
	written := make(chan error, 1)
	go func() {
		_, err := nc.Write(out)
		written <- err
	}()

	fr := newFrameReader(nc, cfg.MaxFrameSize, g)
	peer, rerr := readHello(fr)
	if rerr != nil {
		// Unblock the writer before waiting for it.
		nc.SetDeadline(time.Unix(1, 0))
	}
	werr := <-written
	switch {
	case rerr != nil:
		fr.release()
		return Hello{}, nil, rerr
	case werr != nil:
		fr.release()
		return Hello{}, nil, werr
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		fr.release()
		return Hello{}, nil, err
	}
	return peer, fr, nil
}

func readHello(fr *frameReader) (Hello, error) {
	p, err := fr.next()
	if err != nil {
		if fr.looksLikeTLS() {
			return Hello{}, fmt.Errorf("%w: the peer speaks TLS and this side does not: configure TLS on both ends or on neither", ErrTLS)
		}
		if line, ok := fr.httpAnswer(); ok {
			return Hello{}, fmt.Errorf("%w: it answers in HTTP (%q): it is an HTTP port, such as a node's management address; "+
				"give the node's RPC address (the one its server listens on, cluster.Config.RPCAddr)", ErrNotRPC, line)
		}
		return Hello{}, err
	}
	f, err := Decode(p)
	if err != nil {
		return Hello{}, helloError(p, err)
	}
	h, ok := f.(*Hello)
	if !ok {
		return Hello{}, fmt.Errorf("%w: first frame is %s, want hello", ErrMalformedFrame, f.Type())
	}
	if h.Version < Version {
		return Hello{}, fmt.Errorf("%w: %s, this node %d revision %d", ErrBadVersion, h, Version, Revision)
	}
	if h.Caps&CapAtLimit != 0 {
		return Hello{}, fmt.Errorf("%w (peer %q)", ErrAtLimit, h.Node)
	}
	return *h, nil
}

// helloError names what the peer speaks when its Hello cannot be decoded:
// a Hello of another protocol version still starts with the version and
// the sender's name, whatever follows.
func helloError(p []byte, err error) error {
	if len(p) < 2 || FrameType(p[1]) != TypeHello {
		return err
	}
	r := codec.NewReader(p[2:])
	h := Hello{Version: r.Byte(), Node: r.String()}
	if r.Err() != nil {
		return err
	}
	_ = r.String() // the group
	if r.Len() > 0 {
		r.Uvarint() // the frame limit
	}
	if r.Len() > 0 {
		h.Revision = uint32(r.Uvarint())
	}
	return fmt.Errorf("%s, this node %d revision %d, and it cannot read the peer's hello: %w", &h, Version, Revision, err)
}

// looksLikeTLS reports whether the bytes received so far start a TLS
// record (a handshake or an alert, version 3.x): a length prefix that a
// TLS peer sent by mistake reads as a frame of hundreds of megabytes.
func (r *frameReader) looksLikeTLS() bool {
	b := r.buf[r.r:r.w]
	return len(b) >= 2 && (b[0] == 0x16 || b[0] == 0x15) && b[1] == 0x03
}

// httpAnswer returns the first line of what was received so far if it is
// an HTTP answer: "HTTP/1.1 400 Bad Request" read as a length prefix is a
// frame of over a gigabyte, refused as soon as four bytes are in.
func (r *frameReader) httpAnswer() (string, bool) {
	b := r.buf[r.r:r.w]
	if !bytes.HasPrefix(b, []byte("HTTP")) {
		return "", false
	}
	line, _, _ := bytes.Cut(b[:min(len(b), 80)], []byte("\r\n"))
	return string(line), true
}

// stream is a Conn over a net.Conn after the Hello exchange. One goroutine
// reads and dispatches frames in order. There is no writer goroutine: a
// Send that finds the connection free writes its frame itself, without
// waiting for the socket (a non-blocking write); frames sent while a write
// is in progress are appended to a pending buffer, which a flusher
// goroutine writes whole, so a busy connection batches. The flusher also
// writes what the socket does not take at once (a peer that reads slowly,
// or a connection without non-blocking writes, such as TLS), and lives
// only until the queue is empty.
type stream struct {
	nc       net.Conn
	fr       *frameReader
	h        Handler
	peer     Hello
	cfg      Config
	g        *guard   // nil: no node-wide limits (dialed streams in tests)
	maxFrame int      // the smaller of our limit and the peer's
	desc     string   // peer name and address, for errors and logs
	onClose  func()   // called once when the read loop ends
	raw      *tcpConn // non-blocking writes; nil where the conn is not plain TCP

	mu        sync.Mutex
	pending   []byte    // frames waiting for the goroutine that writes
	spare     []byte    // the last buffer written, ready to become pending
	writing   bool      // a goroutine is writing: a Send only appends to pending
	written   sync.Cond // signalled when writing ends; L is &mu
	closing   bool      // no more Sends; queued frames are flushed
	broken    bool      // the connection failed: queued frames are dropped
	reason    error     // why the connection ended; set once, with reasonSet
	reasonSet bool
	lastSend  time.Time // when the queue last went from empty to not empty

	readerDone chan struct{}

	// The read goroutine's turn, and work it runs inline (inline.go).
	turn      atomic.Pointer[readTurn] // the goroutine that reads now
	lendMu    sync.Mutex               // guards the lend fields
	lending   bool                     // the reader runs inline work
	lendAt    time.Time                // when that work started
	lendWork  interface{ Run() }       // that work, until it returns
	lendGrace time.Duration            // how long it may run
	lendTimer *time.Timer              // checks on the work; hands the reading on when it overruns
	lendDue   time.Time                // when lendTimer fires, if set

	cr atomic.Pointer[callerReads] // set once callers read the connection (callerread.go)

	// crowdAt is when the reader last found frames read side by side
	// with others of their kind: answers while other answers were
	// awaited, or work while more work was waiting. Sends then write a
	// little later, in batches (batch.go). UnixNano.
	crowdAt atomic.Int64

	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	writes, queueFull          atomic.Uint64
	callerFrames               atomic.Uint64
}

var _ StatsConn = (*stream)(nil)

// newStream starts the read loop of a connection whose Hello exchange is
// done. cfg must have its defaults applied. idle is the idle timeout of
// this side (<= 0: none); onClose, if set, runs when the connection has
// ended.
func newStream(nc net.Conn, fr *frameReader, peer Hello, cfg Config, h Handler, g *guard, idle time.Duration, onClose func()) *stream {
	s := &stream{
		nc:         nc,
		fr:         fr,
		h:          h,
		peer:       peer,
		cfg:        cfg,
		g:          g,
		maxFrame:   cfg.MaxFrameSize,
		desc:       fmt.Sprintf("%q at %s", peer.Node, nc.RemoteAddr()),
		onClose:    onClose,
		raw:        rawTCP(nc),
		lastSend:   time.Now(),
		readerDone: make(chan struct{}),
	}
	s.written.L = &s.mu
	if peer.MaxFrame > 0 && int(peer.MaxFrame) < s.maxFrame {
		s.maxFrame = int(peer.MaxFrame)
	}
	fr.arm(nc, cfg.FrameTimeout, idle, s.stillBusy)
	go s.readLoop(s.newTurn())
	return s
}

// stillBusy is the reader's idle check: it reports whether the connection
// sent anything within the idle timeout, and otherwise marks it closing
// under the lock that Send takes, so a frame is either queued before the
// connection is judged idle or refused with ErrIdle, never lost between.
func (s *stream) stillBusy(lastRecv time.Time) (time.Time, bool) {
	idle := s.fr.idleTimeout
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.lastSend
	if lastRecv.After(last) {
		last = lastRecv
	}
	if s.writing {
		return time.Now().Add(idle), true
	}
	if until := last.Add(idle); time.Now().Before(until) {
		return until, true
	}
	s.closing = true
	s.setReasonLocked(fmt.Errorf("%w: %s: no frame either way for %v", ErrIdle, s.desc, idle))
	return time.Time{}, false
}

// Peer returns the Hello the peer sent.
func (s *stream) Peer() Hello { return s.peer }

// Send queues f for writing and, if no other goroutine is writing, writes
// it without waiting for the socket. It fails with ErrQueueFull when the
// queue already holds SendQueueBytes, with ErrClosed after the connection
// ended, and with ErrFrameTooLarge for a frame over MaxFrameSize.
func (s *stream) Send(f Frame) error {
	s.mu.Lock()
	if err := s.appendLocked(f); err != nil {
		return err
	}
	if s.crowdedWithin(batchAfterCrowd) {
		s.writeSoonLocked()
	} else {
		s.writeLocked()
	}
	return nil
}

// appendLocked encodes f at the end of the queue. Called with s.mu held;
// it unlocks it when it fails.
func (s *stream) appendLocked(f Frame) error {
	if s.closing {
		s.mu.Unlock()
		return s.closedError()
	}
	start := len(s.pending)
	b, err := AppendFrame(s.pending, f, s.maxFrame)
	if err != nil {
		s.mu.Unlock()
		if s.maxFrame < s.cfg.MaxFrameSize {
			return fmt.Errorf("%w (the limit of %s)", err, s.desc)
		}
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
	s.framesSent.Add(1)
	if start == 0 {
		s.lastSend = time.Now()
	}
	return nil
}

// writeLocked writes the queue, unless it is empty or another goroutine is
// writing it (that one takes the rest). Called with s.mu held; it unlocks
// it.
func (s *stream) writeLocked() {
	if s.writing || len(s.pending) == 0 {
		s.mu.Unlock()
		return
	}
	s.writing = true
	buf := s.takePendingLocked()
	s.mu.Unlock()
	s.writeInline(buf)
}

// takePendingLocked hands the pending frames to the writer, the spare
// buffer taking their place. Called with s.mu held.
func (s *stream) takePendingLocked() []byte {
	buf := s.pending
	s.pending, s.spare = s.spare[:0], nil
	return buf
}

// writeInline writes buf as far as the socket takes it without waiting.
// What it does not take, and frames queued meanwhile, go to a flusher: the
// caller does not pay for its neighbours' frames, and a connection busy
// enough to queue frames behind a write gets them written in batches.
func (s *stream) writeInline(buf []byte) {
	n, err := s.raw.writeNow(buf)
	if n > 0 {
		s.writes.Add(1)
		s.bytesSent.Add(uint64(n))
	}
	if err != nil {
		s.fail(fmt.Errorf("%w: writing to %s: %w", ErrClosed, s.desc, err))
		s.doneWriting(buf)
		return
	}
	if n == len(buf) {
		s.mu.Lock()
		if len(s.pending) == 0 || s.broken {
			s.doneWritingLocked(buf)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	go s.flush(buf, n)
}

// flush writes buf[off:] and then whatever is pending until the queue is
// empty, waiting for the socket, each write bounded by the frame timeout so
// that a peer that stops reading cannot hold the queue forever (Close sets
// its own, shorter bound). Before it ends it yields once: goroutines about
// to send then join its next write instead of each making its own.
func (s *stream) flush(buf []byte, off int) {
	s.mu.Lock()
	if !s.closing {
		s.nc.SetWriteDeadline(time.Now().Add(s.cfg.FrameTimeout))
	}
	s.mu.Unlock()
	yielded := false
	for {
		if off < len(buf) {
			n, err := s.nc.Write(buf[off:])
			s.writes.Add(1)
			s.bytesSent.Add(uint64(n))
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					err = fmt.Errorf("the peer read %d of %d bytes in %v: %w", n, len(buf)-off, s.cfg.FrameTimeout, err)
				}
				s.fail(fmt.Errorf("%w: writing to %s: %w", ErrClosed, s.desc, err))
				s.doneWriting(buf)
				return
			}
		}
		s.mu.Lock()
		if len(s.pending) == 0 && !s.broken && !yielded {
			s.mu.Unlock()
			runtime.Gosched()
			yielded, off = true, len(buf)
			continue
		}
		if len(s.pending) == 0 || s.broken {
			if !s.closing {
				// Inline writes must not find a deadline passed.
				s.nc.SetWriteDeadline(time.Time{})
			}
			s.doneWritingLocked(buf)
			s.mu.Unlock()
			return
		}
		if !s.closing {
			s.nc.SetWriteDeadline(time.Now().Add(s.cfg.FrameTimeout))
		}
		s.keepSpareLocked(buf)
		buf, off = s.takePendingLocked(), 0
		s.mu.Unlock()
	}
}

// keepSpareLocked keeps a written buffer for reuse, unless one large burst
// made it big enough to pin memory for the connection's whole life.
func (s *stream) keepSpareLocked(buf []byte) {
	if cap(buf) <= maxRetainedBuffer {
		s.spare = buf[:0]
	}
}

func (s *stream) doneWriting(buf []byte) {
	s.mu.Lock()
	s.doneWritingLocked(buf)
	s.mu.Unlock()
}

// doneWritingLocked ends a writer's turn. After a failure the frames still
// queued are dropped. Called with s.mu held.
func (s *stream) doneWritingLocked(buf []byte) {
	if s.broken {
		s.pending = s.pending[:0]
	}
	s.keepSpareLocked(buf)
	s.writing = false
	s.written.Broadcast()
}

// waitWritten waits until no goroutine is writing.
func (s *stream) waitWritten() {
	s.mu.Lock()
	for s.writing {
		s.written.Wait()
	}
	s.mu.Unlock()
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

// Close flushes queued frames (waiting at most closeFlushTimeout for a peer
// that does not read) and closes the connection. The handler's HandleClose
// gets a nil error unless the connection had already failed.
func (s *stream) Close() error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		s.setReasonLocked(nil)
		s.nc.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		if !s.writing && len(s.pending) > 0 {
			// Frames Queue left for the reader to write.
			s.writing = true
			go s.flush(s.takePendingLocked(), 0)
		}
	}
	for s.writing {
		s.written.Wait()
	}
	s.mu.Unlock()
	s.nc.Close()
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
		CallerReads:    s.callerFrames.Load(),
	}
}

// readLoop reads and handles frames until the connection ends, until
// work it ran inline overran and another goroutine took over the reading
// (inline.go), or until it leaves the reading to the callers
// (callerread.go). Frames that handlers queued go out once the frames read
// so far are handled, before the loop waits for the network again.
func (s *stream) readLoop(me *readTurn) {
	crowded := false    // other answers were awaited beside the ones just read
	var batch time.Time // when the reader last wrote what handlers queued
	handled := 0        // frames handled since
	err := readFrames(s.fr, func(f Frame, size int) bool {
		crowded = crowded || s.awaited() > 1
		s.handle(f, size)
		if s.turn.Load() != me {
			return false
		}
		if !s.fr.buffered() {
			s.flushQueued()
			handled = 0
			if crowded {
				s.crowded()
			} else if s.rest() {
				return false
			}
			crowded = false
			return true
		}
		// Acks wait for the end of the batch, to leave in one write; but
		// on a saturated node a batch of a few hundred attempts takes
		// long enough to handle that the client would read the silence as
		// a dead node. Past queuedFlushAfter they go out on the way.
		if handled++; handled == 1 {
			batch = time.Now()
		} else if handled%queuedCheckEvery == 0 && time.Since(batch) >= queuedFlushAfter {
			s.flushQueued()
			batch = time.Now()
		}
		return true
	})
	if err == errHandedOver {
		return
	}
	s.readEnded(err)
}

// A read goroutine handling a batch of frames writes the frames their
// handlers queued (acks) at the end of the batch, or once queuedFlushAfter
// has passed since it last did, looking at the clock every
// queuedCheckEvery frames.
const (
	queuedFlushAfter = 5 * time.Millisecond
	queuedCheckEvery = 8
)

// handle hands a frame read to the handler.
func (s *stream) handle(f Frame, size int) {
	s.framesReceived.Add(1)
	s.bytesReceived.Add(uint64(size))
	s.h.HandleFrame(s, f)
}

// readEnded ends the connection whose reading failed with err; the
// goroutine that read last calls it.
func (s *stream) readEnded(err error) {
	defer close(s.readerDone)
	err = s.readFailed(err)
	s.fr.release()
	if s.onClose != nil {
		s.onClose()
	}
	s.h.HandleClose(s, err)
}

// readFrames decodes the frames that follow the Hello exchange and hands
// each to handle with its size on the wire, until the stream fails or
// handle returns false (then it returns errHandedOver).
func readFrames(fr *frameReader, handle func(f Frame, size int) bool) error {
	var d Decoder
	for {
		f, size, err := readFrame(fr, &d)
		if err != nil {
			return err
		}
		if !handle(f, size) {
			return errHandedOver
		}
	}
}

// readFrame reads and decodes the next frame, and returns it with its size
// on the wire.
func readFrame(fr *frameReader, d *Decoder) (Frame, int, error) {
	p, err := fr.next()
	if err != nil {
		return nil, 0, err
	}
	f, err := d.Decode(p)
	if err != nil {
		return nil, 0, err
	}
	if f.Type() == TypeHello {
		return nil, 0, fmt.Errorf("%w: hello after the handshake", ErrMalformedFrame)
	}
	return f, len(p) + 4, nil
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
		s.waitWritten()
		return nil
	}
	addr := s.nc.RemoteAddr().String()
	log := s.cfg.Logger.With("peer", s.peer.Node, "addr", addr)
	switch {
	case isProtocolError(err):
		err = fmt.Errorf("from %s: %w", s.desc, err)
		s.refuse(refusedBadFrame, addr, err, log, "transport: closing connection after a bad frame")
	case errors.Is(err, ErrFrameTimeout):
		err = fmt.Errorf("from %s: %w", s.desc, err)
		s.refuse(refusedFrameTimeout, addr, err, log, "transport: closing connection: frame not completed in time")
	case errors.Is(err, ErrOverloaded):
		err = fmt.Errorf("from %s: %w", s.desc, err)
		s.refuse(refusedBufferLimit, addr, err, log, "transport: closing connection: read-buffer limit reached")
	case errors.Is(err, ErrIdle):
		if s.g != nil {
			s.g.idle.Add(1)
		}
		log.Debug("transport: closing idle connection", "err", err)
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("%w: %s closed the connection%s", ErrClosed, s.desc, s.revisionHint())
		log.Debug("transport: peer closed the connection")
	case errors.Is(err, syscall.ECONNRESET):
		err = fmt.Errorf("%w: reading from %s%s: %w", ErrReset, s.desc, s.revisionHint(), err)
		log.Info("transport: connection reset", "err", err)
	default:
		err = fmt.Errorf("%w: reading from %s: %w", ErrClosed, s.desc, err)
		log.Info("transport: connection lost", "err", err)
	}
	s.fail(err)
	s.waitWritten()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// revisionHint names the peer's protocol revision when it is not this
// node's: a peer of an older revision closes the connection on a frame it
// cannot read, and the cause is best named where it shows.
func (s *stream) revisionHint() string {
	if s.peer.Revision == Revision {
		return ""
	}
	return fmt.Sprintf(" (%s, this node %d revision %d: a peer of an older revision closes the connection on a frame it cannot read)", &s.peer, Version, Revision)
}

// refuse counts and logs, at a bounded rate, a connection ended for cause;
// without a guard it logs every one.
func (s *stream) refuse(kind refusal, addr string, err error, log *slog.Logger, msg string) {
	if s.g != nil {
		s.g.refuse(kind, addr, s.peer.Node, err)
		return
	}
	log.Warn(msg, "err", err)
}
