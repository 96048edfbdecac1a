package transport

import (
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// Work a frame starts (a request's handler, say) can run on the
// connection's read goroutine instead of being handed to another one. On a
// quiet connection the handoff is most of a call's cost: waking a goroutine
// on an idle CPU takes longer than a quick handler runs. The read goroutine
// must not stall the frames behind it, though, so it runs work inline only
// when nothing else has been read (RunInline), or when the work takes less
// time than handing it over would (RunAhead): the frames behind it then
// wait less than they would for the handoff. When the work overruns its
// grace, a new goroutine takes over the reading and the old one ends with
// the work.
//
// Acknowledgements and other frames a handler sends on the way are queued
// rather than written: they go out with the next write, often the result
// of the work itself, or when the reader has handled what it has read.

// readTurn identifies one read goroutine of a stream; stream.turn points
// at the one that reads now. The field keeps it from being zero-sized:
// each turn must have an address of its own.
type readTurn struct{ _ byte }

// newTurn makes a new read turn the current one: from then on only the
// goroutine given it reads, and the one that read before ends once its
// frame is handled.
func (s *stream) newTurn() *readTurn {
	t := new(readTurn)
	s.turn.Store(t)
	return t
}

// errHandedOver ends a read loop whose reading another goroutine took over.
var errHandedOver = errHandedOverT{}

type errHandedOverT struct{}

func (errHandedOverT) Error() string { return "transport: reading handed over" }

// Queue implements conncap.InlineConn.
func (s *stream) Queue(f frame.Frame) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appendLocked(f)
}

// RunInline implements conncap.InlineConn.
func (s *stream) RunInline(w interface{ Run() }, grace time.Duration) bool {
	if s.fr.buffered() {
		s.crowded()
		return false
	}
	s.lend(w, grace)
	return true
}

// RunAhead implements conncap.InlineConn.
func (s *stream) RunAhead(w interface{ Run() }, grace time.Duration) {
	if s.fr.buffered() {
		s.crowded()
	}
	s.lend(w, grace)
}

// lend runs w on the read goroutine, watched by the overrun timer.
func (s *stream) lend(w interface{ Run() }, grace time.Duration) {
	// The frames before w are handled: what they left for the batch's
	// end must not wait for w.
	s.endBatch()
	me := s.turn.Load()
	// w's time counts from its frame's read, microseconds before: that
	// spares a clock reading, and the grace is counted in milliseconds.
	at := conncap.ReceivedAt(s)
	s.lendMu.Lock()
	s.lending, s.lendAt, s.lendGrace, s.lendWork = true, at, grace, w
	s.lendRuns++
	// The timer is armed when it rests and checks on whichever work runs
	// when it fires, rather than being set and stopped around each run:
	// on a node with thousands of timers (one per operation held open),
	// each timer moved to an earlier time makes the scheduler walk them
	// all, and each move can wake a thread. It is armed again only for
	// work with a shorter grace than the one it was armed for.
	if s.lendDue.IsZero() || grace < s.lendEvery.base {
		d := s.lendEvery.start(grace)
		s.lendDue = s.lendAt.Add(d)
		if s.lendTimer == nil {
			// The overrun timer: each firing runs overran on a goroutine
			// of its own, which may start a reader.
			s.lendTimer = time.AfterFunc(d, s.overran)
		} else {
			s.lendTimer.Reset(d)
		}
	}
	s.readerWrites.Store(true)
	s.lendMu.Unlock()

	w.Run()

	s.lendMu.Lock()
	if s.turn.Load() == me {
		s.lending, s.lendWork = false, nil
		s.readerWrites.Store(false)
	}
	s.lendMu.Unlock()
}

// overran hands the reading to a new goroutine if the inline work running
// now has taken longer than its grace. Otherwise, if work runs or ran
// inline since the last check, it checks again twice as late
// (checktimer.go); if none did, it lets the timer rest.
func (s *stream) overran() {
	s.lendMu.Lock()
	used := s.lendRuns != s.lendChecked
	s.lendChecked = s.lendRuns
	if !s.lending || time.Since(s.lendAt) < s.lendGrace {
		if used || s.lending {
			d := s.lendEvery.longer()
			s.lendDue = time.Now().Add(d)
			s.lendTimer.Reset(d)
		} else {
			s.lendDue = time.Time{}
		}
		s.lendMu.Unlock()
		return
	}
	s.lendDue = time.Time{}
	s.lending = false
	// Sends go back to writing for themselves: this reader writes nothing
	// more, and what they left to it so far is written below.
	s.readerWrites.Store(false)
	if o, ok := s.lendWork.(conncap.Overrunner); ok {
		o.Overran()
	}
	s.lendWork = nil
	next := s.newTurn()
	s.lendMu.Unlock()
	s.flushQueued()
	// The reader, taking over from the one running the overrun work: it
	// holds the new turn, and with it fr.
	go s.readLoop(next)
}
