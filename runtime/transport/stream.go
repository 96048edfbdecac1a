package transport

import (
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

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

const (
	// maxRetainedBuffer bounds the write buffer a connection keeps between
	// uses, so one large burst does not pin memory for its whole life.
	maxRetainedBuffer = 1 << 20
	// closeFlushTimeout bounds how long Close waits to flush queued frames
	// to a peer that does not read.
	closeFlushTimeout = time.Second
)

// stream is a Conn over a net.Conn after the Hello exchange. There is no
// writer goroutine: a Send that finds the connection free writes its frame
// itself, without waiting for the socket (a non-blocking write); frames
// sent while a write is in progress are appended to a pending buffer,
// which a flusher writes whole, so a busy connection batches.
//
// Its goroutines, by role, each started by a function named for it:
//
//   - the reader (readLoop) reads frames in order and hands each to the
//     handler; it holds the read turn (turn) and owns fr while it does.
//     Work it runs inline that overruns its grace hands the turn to a new
//     reader (inline.go), and a read goroutine with nothing to read
//     leaves the turn free for callers (callerread.go).
//   - a caller reading its own answer (ReadFor) holds the read turn, and
//     fr, as a reader does, on the caller's goroutine.
//   - the flusher (flush, flushSoon) writes the queue while the inline
//     write of a Send cannot: what the socket did not take at once (a
//     peer that reads slowly, or a connection without non-blocking
//     writes, such as TLS), and frames queued behind it. It owns the
//     buffer it took from pending while writing is set, and lives only
//     until the queue is empty.
//   - the overrun timer (lendTimer, overran) and the lazy reader timer
//     (callerReads.lazy, lazyRead) start readers.
//
// Locks: mu, lendMu and callerReads.mu are never held together. lendMu is
// held while Overrunner.Overran runs, which therefore must not block.
type stream struct {
	// Set by newStream and not changed after.
	nc       net.Conn
	h        ConnHandler
	peer     frame.Hello
	cfg      Config
	g        *guard             // nil: no node-wide limits (dialed streams in tests)
	maxFrame int                // the smaller of our limit and the peer's
	desc     string             // peer name and address, for errors and logs
	onClose  func()             // called once when the read loop ends
	raw      *tcpConn           // non-blocking writes; nil where the conn is not plain TCP
	be       conncap.BatchEnder // h, if it hears where batches end
	// fr is owned by the goroutine that holds the read turn.
	fr *frameReader

	// mu guards the following, the write queue and the connection's end.
	mu        sync.Mutex
	pending   []byte    // frames waiting for the goroutine that writes
	spare     []byte    // the last buffer written, ready to become pending
	writing   bool      // a goroutine (a Send or the flusher) is writing: a Send only appends to pending
	written   sync.Cond // signalled when writing ends; L is &mu
	closing   bool      // no more Sends; queued frames are flushed
	broken    bool      // the connection failed: queued frames are dropped
	reason    error     // why the connection ended; set once, with reasonSet
	reasonSet bool
	lastSend  time.Time // when the queue last went from empty to not empty

	// turn is the read turn: the goroutine that reads now (inline.go).
	turn atomic.Pointer[readTurn]

	// lendMu guards the following, the work the reader runs inline
	// (inline.go).
	lendMu      sync.Mutex
	lending     bool               // the reader runs inline work
	lendAt      time.Time          // when that work started
	lendWork    interface{ Run() } // that work, until it returns
	lendGrace   time.Duration      // how long it may run
	lendTimer   *time.Timer        // checks on the work; hands the reading on when it overruns
	lendDue     time.Time          // when lendTimer fires, if set
	lendEvery   checkInterval      // how long lendTimer waits between checks
	lendRuns    uint64             // works run inline so far
	lendChecked uint64             // lendRuns when lendTimer last checked

	cr atomic.Pointer[callerReads] // set once callers read the connection (callerread.go)

	// readerWrites is set while the goroutine that holds the read turn
	// runs inline work: it writes the queue once the work returns and
	// it has handled what it read, so a crowded connection's Sends leave
	// their frames to it instead of starting a flusher (batch.go).
	readerWrites atomic.Bool

	// crowdAt is when the reader last found frames read side by side
	// with others of their kind: answers while other answers were
	// awaited, or work while more work was waiting. Sends then write a
	// little later, in batches (batch.go). UnixNano.
	crowdAt atomic.Int64

	// Counters, for Stats.
	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	writes, queueFull          atomic.Uint64
	callerFrames               atomic.Uint64
}

// The optional capabilities of a TCP connection.
var (
	_ conncap.InlineConn     = (*stream)(nil)
	_ conncap.CallerReadConn = (*stream)(nil)
	_ conncap.StatsConn      = (*stream)(nil)
	_ conncap.UnreadConn     = (*stream)(nil)
	_ conncap.ReceivedAtConn = (*stream)(nil)
)

// newStream starts the read loop of a connection whose Hello exchange is
// done. cfg must have its defaults applied. idle is the idle timeout of
// this side (<= 0: none); onClose, if set, runs when the connection has
// ended.
func newStream(nc net.Conn, fr *frameReader, peer frame.Hello, cfg Config, h ConnHandler, g *guard, idle time.Duration, onClose func()) *stream {
	s := &stream{
		nc:       nc,
		fr:       fr,
		h:        h,
		peer:     peer,
		cfg:      cfg,
		g:        g,
		maxFrame: cfg.MaxFrameSize,
		desc:     fmt.Sprintf("%q at %s", peer.Node, nc.RemoteAddr()),
		onClose:  onClose,
		raw:      rawTCP(nc),
		lastSend: time.Now(),
	}
	s.written.L = &s.mu
	s.be, _ = h.(conncap.BatchEnder)
	if peer.MaxFrame > 0 && int(peer.MaxFrame) < s.maxFrame {
		s.maxFrame = int(peer.MaxFrame)
	}
	fr.arm(nc, cfg.FrameTimeout, idle, s.stillBusy)
	// The reader: it holds the first read turn, and with it fr.
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
func (s *stream) Peer() frame.Hello { return s.peer }

// Send queues f for writing and, if no other goroutine is writing, writes
// it without waiting for the socket. It fails with ErrQueueFull when the
// queue already holds SendQueueBytes, with ErrClosed after the connection
// ended, and with ErrFrameTooLarge for a frame over MaxFrameSize.
func (s *stream) Send(f frame.Frame) error {
	s.mu.Lock()
	if err := s.appendLocked(f); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.writing {
		s.mu.Unlock() // the goroutine writing takes f with the rest
		return nil
	}
	if s.crowdedWithin(batchAfterCrowd) {
		if s.readerWrites.Load() {
			s.mu.Unlock() // the reader writes f with the rest of its batch
			return nil
		}
		s.writing = true
		s.mu.Unlock()
		// The flusher: it owns the queue's buffers until writing ends.
		go s.flushSoon()
		return nil
	}
	s.writing = true
	buf := s.takePendingLocked()
	s.mu.Unlock()
	s.writeInline(buf)
	return nil
}

// appendLocked encodes f at the end of the queue. Called with s.mu held.
func (s *stream) appendLocked(f frame.Frame) error {
	if s.closing {
		return s.closedErrorLocked()
	}
	start := len(s.pending)
	b, err := frame.Append(s.pending, f, s.maxFrame)
	if err != nil {
		if s.maxFrame < s.cfg.MaxFrameSize {
			return fmt.Errorf("%w (the limit of %s)", err, s.desc)
		}
		return err
	}
	// An empty queue takes any frame, so a frame larger than the queue
	// bound can still be sent.
	if start > 0 && len(b) > s.cfg.SendQueueBytes {
		s.pending = b[:start]
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

// startWritingLocked makes the caller the goroutine that writes the queue,
// and reports true, unless the queue is empty or another goroutine is
// writing it (that one takes the rest). Called with s.mu held.
func (s *stream) startWritingLocked() bool {
	if s.writing || len(s.pending) == 0 {
		return false
	}
	s.writing = true
	return true
}

// flushQueued writes the queue, what Queue left waiting included, on the
// calling goroutine, unless it is empty or another goroutine is writing it.
func (s *stream) flushQueued() {
	s.mu.Lock()
	if !s.startWritingLocked() {
		s.mu.Unlock()
		return
	}
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
	// The flusher: it owns buf, and the queue's buffers after it, until
	// writing ends.
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

// closedErrorLocked is the error of a Send after the connection ended.
// Called with s.mu held.
func (s *stream) closedErrorLocked() error {
	if s.reason != nil {
		return fmt.Errorf("%w: to %s: %w", ErrClosed, s.desc, s.reason)
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
			// Frames Queue left for the reader to write. The flusher:
			// it owns them until writing ends.
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

// setReasonLocked records err as why the connection ended, unless a
// reason is recorded already. Called with s.mu held.
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

// Unread returns the bytes the peer sent that wait in the socket unread,
// or -1 where the connection cannot tell (not plain TCP on Linux).
func (s *stream) Unread() int {
	if s.raw == nil {
		return -1
	}
	return s.raw.unread()
}

// Stats reports what the connection has done so far.
func (s *stream) Stats() conncap.Stats {
	return conncap.Stats{
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
	err := readFrames(s.fr, func(f frame.Frame, size int) bool {
		crowded = crowded || s.awaited() > 1
		s.handle(f, size)
		if s.turn.Load() != me {
			return false
		}
		if !s.fr.buffered() {
			s.endBatch()
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
		// a dead node. Past queuedFlushAfter they go out on the way, and
		// what else the frames left for the batch's end goes too.
		if handled++; handled == 1 {
			batch = time.Now()
		} else if handled%queuedCheckEvery == 0 && time.Since(batch) >= queuedFlushAfter {
			s.endBatch()
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

// endBatch tells the handler that the frames read so far are handled
// (conncap.BatchEnder). The goroutine that holds the read turn calls it
// before it waits for the network, runs work that may take long, or ends.
func (s *stream) endBatch() {
	if s.be != nil {
		s.be.HandleBatchEnd()
	}
}

// handle hands a frame read to the handler.
func (s *stream) handle(f frame.Frame, size int) {
	s.framesReceived.Add(1)
	s.bytesReceived.Add(uint64(size))
	s.h.HandleFrame(s, f)
}

// readEnded ends the connection whose reading failed with err; the
// goroutine that read last calls it.
func (s *stream) readEnded(err error) {
	s.endBatch()
	err = s.readFailed(err)
	s.fr.release()
	if s.onClose != nil {
		s.onClose()
	}
	s.h.HandleClose(s, err)
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
	case frame.IsInvalid(err):
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
	if s.peer.Revision == frame.Revision {
		return ""
	}
	return fmt.Sprintf(" (%s, this node %d revision %d: a peer of an older revision closes the connection on a frame it cannot read)", &s.peer, frame.Version, frame.Revision)
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
