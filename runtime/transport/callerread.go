package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// A caller waiting alone for its answer can read the connection itself,
// as a caller of a plain request-response socket does, instead of a read
// goroutine reading the answer and waking it. On an idle machine that wake
// is most of a quick call's latency: readying a goroutine while a CPU is
// idle wakes an idle thread.
//
// Reading is a turn (readTurn): one goroutine holds it at a time. On a
// connection callers read, the turn is often free: a caller that read its
// own answer leaves it free when no other answer is awaited, and the next
// caller takes it directly. A free turn does not stay free for long: a
// timer starts a read goroutine once it has stayed free for lazyReadAfter,
// so that a peer's close or a frame nobody awaits is still noticed off
// any call's path. While callers keep taking the turn, the timer checks
// less often (checktimer.go): after a long run of calls, the read
// goroutine takes the turn up to maxCheckBackoff times lazyReadAfter
// after the last one.
// When other answers are awaited, a caller that leaves hands the turn to
// a read goroutine at once; that goroutine in turn leaves it free once no
// answer is awaited, nothing is left to read, and no answer was read
// beside others for lazyReadAfter.

// lazyReadAfter is how long the reading stays free before a read
// goroutine takes it: the next call of a caller that calls in a loop
// comes sooner, and a peer's close is noticed this much later (after a
// long run of calls, up to maxCheckBackoff times this).
const lazyReadAfter = 2 * time.Millisecond

// unwatchedRead is how long a caller reads before it watches its context
// (which costs allocations); it is also how late it may notice that its
// context ended meanwhile.
const unwatchedRead = time.Millisecond

// errWake ends a caller's reading: its time came, or its context ended.
var errWake = errors.New("transport: caller stopped reading")

// errLarge ends a caller's reading at a frame that is not gathered in the
// read buffer: a read goroutine reads it.
var errLarge = errors.New("transport: large frame left to the read goroutine")

// callerReads is the state of a connection that callers read. It exists
// once a caller has expected an answer: a server's connections have none.
type callerReads struct {
	expect atomic.Int32 // answers awaited (Expect)
	stop   atomic.Bool  // the reading caller's context ended

	// free: nobody reads, and lazy is armed. Changed under mu; read
	// without it first, so that callers on a busy connection, where a
	// read goroutine holds the turn, do not contend for mu.
	free atomic.Bool

	// mu guards the following, and changes to free.
	mu        sync.Mutex
	reading   bool          // a caller reads: Interrupt may stop it
	lazyDue   time.Time     // when lazy fires; zero while it rests
	lazyEvery checkInterval // how long lazy waits between checks
	checkedAt time.Time     // when lazy last checked
	freedAt   time.Time     // when the turn was last left free

	// Set when the connection's callerReads is made, and not changed
	// after (tests lengthen after before any caller reads).
	lazy  *time.Timer   // starts a read goroutine when the turn stays free
	after time.Duration // lazyReadAfter
	turn  readTurn      // the turn of whichever caller reads
	wake  func()        // interrupt, bound once

	// dec is the callers' decoder, owned by the caller that holds turn.
	dec frame.Decoder
}

// Expect implements conncap.CallerReadConn.
func (s *stream) Expect(delta int) {
	s.callerReads().expect.Add(int32(delta))
}

func (s *stream) callerReads() *callerReads {
	if cr := s.cr.Load(); cr != nil {
		return cr
	}
	cr := &callerReads{after: lazyReadAfter}
	cr.wake = func() { s.interrupt(cr) }
	// The lazy reader timer: each firing runs lazyRead on a goroutine of
	// its own, which becomes the reader if no caller took the turn.
	cr.lazy = time.AfterFunc(time.Hour, func() { s.lazyRead(cr) })
	cr.lazy.Stop()
	if !s.cr.CompareAndSwap(nil, cr) {
		return s.cr.Load()
	}
	return cr
}

// ReadFor implements conncap.CallerReadConn.
func (s *stream) ReadFor(ctx context.Context, w conncap.Waiter, until time.Time) bool {
	cr := s.cr.Load()
	if cr == nil || !cr.free.Load() || w.Ready() {
		return false
	}
	cr.mu.Lock()
	if !cr.free.Load() {
		cr.mu.Unlock()
		return false
	}
	cr.free.Store(false)
	cr.reading = true
	s.turn.Store(&cr.turn)
	cr.mu.Unlock()

	// A context that can end is watched only once the caller has read for
	// unwatchedRead: a quick answer does not pay for the watch.
	var stop func() bool
	s.fr.until, s.fr.stop = until, &cr.stop
	watch := ctx.Done() != nil
	if watch {
		if soon := time.Now().Add(unwatchedRead); soon.Before(until) {
			s.fr.until = soon
		}
	}
	var err error
	read := false
	for err == nil && !w.Ready() {
		var f frame.Frame
		var size int
		if f, size, err = readFrame(s.fr, &cr.dec); err == nil {
			read = true
			s.callerFrames.Add(1)
			s.handle(f, size)
			if !s.fr.buffered() {
				s.endBatch()
			}
			continue
		}
		if err == errWake && watch && stop == nil && ctx.Err() == nil && s.fr.until.Before(until) {
			stop = context.AfterFunc(ctx, cr.wake)
			s.fr.until, err = until, nil
		}
	}
	// The deadline stays set; early was this caller's to act on, and the
	// next reader treats the deadline as any it finds.
	s.fr.until, s.fr.stop, s.fr.early = time.Time{}, nil, false
	if stop != nil {
		stop()
	}

	cr.mu.Lock()
	cr.reading = false
	if cr.stop.Load() {
		// The interruption left a deadline in the past.
		cr.stop.Store(false)
		s.fr.deadline, s.fr.early = stale, false
	}
	if err != nil && err != errWake && err != errLarge {
		cr.mu.Unlock()
		s.readEnded(err)
		return true
	}
	// free is stored before expect is read, as in rest.
	cr.free.Store(true)
	others := cr.expect.Load()
	if !w.Ready() {
		others--
	}
	if others > 0 || err == errLarge {
		if others > 0 {
			s.crowded()
		}
		cr.free.Store(false)
		next := s.newTurn()
		cr.mu.Unlock()
		// The reader, taking over from this caller: it holds the new
		// turn, and with it fr.
		go s.readLoop(next)
	} else {
		// The turn is freed microseconds after the last frame came, and
		// the lazy reader counts in milliseconds: that frame's time
		// spares a clock reading.
		var at time.Time
		if read {
			at = s.ReceivedAt()
		}
		cr.freed(at)
		cr.mu.Unlock()
	}
	s.flushQueued()
	return true
}

// ReceivedAt implements conncap.ReceivedAtConn: the goroutine that calls
// HandleFrame holds the reading, and with it fr.
func (s *stream) ReceivedAt() time.Time {
	if s.fr.nc == nil {
		return time.Time{}
	}
	return s.fr.lastRecv
}

// interrupt makes the caller reading now stop: its context ended.
func (s *stream) interrupt(cr *callerReads) {
	cr.mu.Lock()
	if cr.reading {
		cr.stop.Store(true)
		s.nc.SetReadDeadline(stale)
	}
	cr.mu.Unlock()
}

// awaited is the number of answers awaited on the connection, if callers
// read it.
func (s *stream) awaited() int32 {
	if cr := s.cr.Load(); cr != nil {
		return cr.expect.Load()
	}
	return 0
}

// rest, called by a read goroutine that has handled everything it read,
// leaves the reading free if callers read the connection and none awaits
// an answer; it reports whether the goroutine is to end. The read
// goroutine calls it only after answers that were awaited alone, and the
// reading stays with it while answers were read beside others lately:
// while many callers call at once, the answers awaited drop to none
// between their calls, and handing the reading back and forth would cost
// more wakes than it saves.
func (s *stream) rest() bool {
	cr := s.cr.Load()
	if cr == nil || cr.expect.Load() > 0 {
		return false
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if s.crowdedWithin(cr.after) {
		return false
	}
	// free is stored before expect is read again: a caller expects before
	// it looks at free, so either it finds the turn free, or its answer
	// is counted here and the reading goes on.
	cr.free.Store(true)
	if cr.expect.Load() > 0 {
		cr.free.Store(false)
		return false
	}
	cr.freed(time.Time{})
	return true
}

// freed, called under mu as the turn is left free, makes sure lazy will
// look at the turn once it has stayed free for after. The timer is armed
// only when it rests (or was armed for a longer after), not moved on every
// call: a caller calling in a loop frees the turn after each call, and
// each move of a timer can wake a thread to watch it. When lazy fires, it
// looks at when the turn was last freed: at, or now if at is zero.
func (cr *callerReads) freed(at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	cr.freedAt = at
	if cr.lazyDue.IsZero() || cr.after < cr.lazyEvery.base {
		d := cr.lazyEvery.start(cr.after)
		cr.lazyDue = cr.freedAt.Add(d)
		cr.lazy.Reset(d)
	}
}

// lazyRead starts a read goroutine on a turn no caller took for after.
// A turn freed since the last check, but not long enough ago, is checked
// again later, each time twice as late; one taken and not freed since
// leaves the timer to rest until it is freed again. A free turn never
// leaves it resting.
func (s *stream) lazyRead(cr *callerReads) {
	cr.mu.Lock()
	now := time.Now()
	used := cr.freedAt.After(cr.checkedAt)
	cr.checkedAt = now
	if free := cr.free.Load(); !free || now.Sub(cr.freedAt) < cr.after {
		if used || free {
			d := cr.lazyEvery.longer()
			cr.lazyDue = now.Add(d)
			cr.lazy.Reset(d)
		} else {
			// Taken since: whoever frees it next arms the timer again.
			cr.lazyDue = time.Time{}
		}
		cr.mu.Unlock()
		return
	}
	cr.lazyDue = time.Time{}
	cr.free.Store(false)
	next := s.newTurn()
	cr.mu.Unlock()
	// The reader, on the timer's goroutine: it holds the new turn, and
	// with it fr.
	s.readLoop(next)
}
