package runtime

import (
	"sync/atomic"
	"time"
)

// Quick handlers run on the read goroutine of the connection their attempt
// arrived on, not on a worker: waking a worker on an idle CPU costs more
// than a quick handler runs, and it is on every call's path. The
// connection decides whether it can lend its reader (nothing else read and
// waiting) and takes the reading elsewhere if the handler overruns
// inlineGrace (conncap.InlineConn); the server decides which handlers are
// quick from how long the method's handler ran lately, and which are so
// short that they run inline even with frames waiting behind them.

const (
	// inlineGrace is how long a handler may hold its connection's reader
	// before reading goes on without it: what a frame behind a handler
	// that turned out slow waits, at most.
	inlineGrace = time.Millisecond
	// inlineBelow is the method's recent handler time under which it runs
	// inline.
	inlineBelow = 100 * time.Microsecond
	// aheadBelow is the method's recent handler time under which it runs
	// inline even with other frames read and waiting behind it: about
	// twice what handing it to a worker costs the server (the worker's
	// wake-up and switches, its select and idle timer: about 2 µs of CPU
	// per call at 64 callers in bench-compare, where those frames waited
	// for the handoff too). On a crowded connection every handoff was
	// such a cost; a handler this short gains nothing from another CPU.
	aheadBelow = 5 * time.Microsecond
	// overranWeight is the run time an overrun counts as before the
	// handler returns: enough to lift any quick average over
	// inlineBelow at once.
	overranWeight = 10 * inlineBelow
)

// handlerPace follows how long a method's handler runs: a moving average
// in which each run weighs one eighth. A method starts out quick; one run
// that overruns the grace marks it slow for the next dozens of runs.
type handlerPace struct{ avg atomic.Int64 } // nanoseconds

func (p *handlerPace) quick() bool { return p.avg.Load() < int64(inlineBelow) }

// tiny reports whether the method runs for less than a handoff costs.
func (p *handlerPace) tiny() bool { return p.avg.Load() < int64(aheadBelow) }

func (p *handlerPace) observe(d time.Duration) {
	// Racing updates may lose one another's weight; the average needs no
	// more precision than that.
	old := p.avg.Load()
	p.avg.Store(old + (int64(d)-old)/8)
}

// Run runs the handler of a started execution; conncap.InlineConn calls
// it on the read goroutine.
func (e *execution) Run() { e.run() }

// Overran marks the method slow the moment its handler overruns the grace
// on the read goroutine (conncap.Overrunner): the calls of it that
// arrive while this one still runs go to workers. Without it, a burst of
// calls to a quick method that all wait on something (a lock, a slow
// disk) would each hold the reader for the grace before the first of them
// returned and was counted, and the heartbeats and acks of every call on
// the connection would wait that long in total.
func (e *execution) Overran() { e.sm.pace.observe(overranWeight) }

// runInline runs e, which arrive started (enqueue), on sc's read goroutine
// if the connection can spare it or e's method is tiny, and on a worker if
// not.
func (s *Server) runInline(sc *serverConn, e *execution) {
	if e.sm.pace.tiny() {
		sc.inline.RunAhead(e, inlineGrace)
		return
	}
	if !sc.inline.RunInline(e, inlineGrace) {
		s.start(e)
	}
}
