package transport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
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
//
// A frameReader has no lock: one goroutine owns it at a time, the
// handshake's, then whichever holds the stream's read turn (the reader, or
// a caller reading its own answer).
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
	// early: deadline is an earlier caller's, kept for the caller reading
	// now, whose own comes at most slack later (setDeadline).
	early    bool
	slack    time.Duration // callerSlack (tests lengthen it)
	lastRecv time.Time

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
	r.lastRecv, r.slack = time.Now(), callerSlack
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
	n, err := frame.Len(r.buf[r.r:r.w], r.max)
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
			if r.early && r.stop != nil && have == 0 {
				// An earlier caller's deadline, kept for this one,
				// fired before this one's: set its own.
				r.deadline, r.early, armed = stale, false, false
				continue
			}
			if have > 0 {
				if need == 0 {
					return 0, fmt.Errorf("%w: %d bytes of a frame header after %v", ErrFrameTimeout, have, r.frameTimeout)
				}
				return 0, fmt.Errorf("%w: %d of %d bytes after %v", ErrFrameTimeout, have, need, r.frameTimeout)
			}
			if until, busy := r.idleCheck(r.lastRecv); busy {
				r.deadline, r.early, armed = until, false, true
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
//
// Between frames it reads no clock unless the deadline moves: it measures
// from the last receive, which is no later than now, so a deadline it
// keeps is never further than the idle timeout from now, and a caller's
// deadline sooner than the idle deadline from the last receive is sooner
// than the one from now. A clock read cost more than a tenth of what a
// call does on the processor outside the kernel, and each read of a
// frame took one.
//
// A reading caller's deadline, a heartbeat timeout after its send, comes
// a call later than the caller's before it: the deadline that caller set
// is kept if it comes at most callerSlack sooner, and read sets the
// caller's own should the kept one fire first. Setting a deadline reads
// the clock twice and moves a runtime timer under its locks, on every
// call otherwise.
func (r *frameReader) setDeadline(mid bool) error {
	var dl time.Time
	switch {
	case mid:
		if r.frameStart.IsZero() {
			r.frameStart = time.Now()
		}
		dl = r.frameStart.Add(r.frameTimeout)
	case r.idleTimeout > 0:
		idleFrom := r.lastRecv.Add(r.idleTimeout)
		if r.stop != nil && r.until.Before(idleFrom) {
			dl = r.until
			break
		}
		if left := r.deadline.Sub(r.lastRecv); r.stop == nil && !r.deadline.IsZero() && left > r.idleTimeout/2 && left <= r.idleTimeout {
			return nil
		}
		dl = time.Now().Add(r.idleTimeout)
	}
	if r.stop != nil && (dl.IsZero() || r.until.Before(dl)) {
		dl = r.until
	}
	if dl.Equal(r.deadline) {
		return nil
	}
	if !mid && r.keepsFor(dl) {
		r.early = true
		return nil
	}
	r.deadline, r.early = dl, false
	return r.nc.SetReadDeadline(dl)
}

// keepsFor reports whether the deadline set may stay for dl, a reading
// caller's own: it is a real one, no later than dl and at most slack
// sooner. setDeadline asks only between frames: a kept deadline that
// fired mid-frame would read as the frame timeout.
func (r *frameReader) keepsFor(dl time.Time) bool {
	return r.stop != nil && dl.Equal(r.until) && r.deadline.After(stale) &&
		!r.deadline.After(dl) && dl.Sub(r.deadline) <= r.slack
}

// stale marks the read deadline as unknown: the next read sets its own.
var stale = time.Unix(1, 0)

// callerSlack is how much sooner than a reading caller's deadline the
// deadline already set may come and be kept (setDeadline): a caller that
// calls in a loop sets it once every few dozen calls.
const callerSlack = time.Millisecond

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

// buffered reports whether a whole frame beyond the one being handled has
// been read: the reader has more to handle before it waits for the
// network. Part of a frame does not count: the reader will wait for the
// rest of it, and what is queued should not wait with it.
func (r *frameReader) buffered() bool {
	rest := r.buf[r.r+r.consume : r.w]
	if len(rest) < 4 {
		return false
	}
	n, err := frame.Len(rest, r.max)
	return err != nil || len(rest) >= 4+n // a bad length is handled at once
}

// readFrames decodes the frames that follow the Hello exchange and hands
// each to handle with its size on the wire, until the stream fails or
// handle returns false (then it returns errHandedOver).
func readFrames(fr *frameReader, handle func(f frame.Frame, size int) bool) error {
	var d frame.Decoder
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
func readFrame(fr *frameReader, d *frame.Decoder) (frame.Frame, int, error) {
	p, err := fr.next()
	if err != nil {
		return nil, 0, err
	}
	f, err := d.Decode(p)
	if err != nil {
		return nil, 0, err
	}
	if f.Type() == frame.TypeHello {
		return nil, 0, fmt.Errorf("%w: hello after the handshake", ErrMalformedFrame)
	}
	return f, len(p) + 4, nil
}
