package runtime

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// serverConn is the server's side of one client connection: the attempts it
// waits on, and the ticker that heartbeats them all in one frame per
// interval. The ticker is a timer that runs each tick on a goroutine of its
// own, armed only while the connection has attempts: a goroutine waiting
// for each connection's next tick would cost every connection with
// attempts a stack, and a timer costs nothing to arm again, so it stops at
// the first tick that finds no attempt.
type serverConn struct {
	// Set when the connection's first attempt arrives, read only after.
	s         *Server
	conn      transport.Conn
	inline    conncap.InlineConn // conn, if its read goroutine can run handlers
	tellsLate bool               // the client reads Heartbeat.Late (revision 2)

	// s.mu guards the following.
	calls   map[uint64]*execution
	ticking bool

	// armMu guards the following, and is taken last: startHeartbeats
	// arms the ticker with s.mu held, and a tick arms it again without.
	// interval is written with s.mu and armMu held, and read with either.
	armMu    sync.Mutex
	interval time.Duration // what the client asked for (the least while ticking)
	ticker   *time.Timer   // runs tick; nil until the first attempt
	due      time.Time     // when the armed tick is due
	prevRun  time.Time     // when the previous tick ran, or the ticker was armed
	prevDue  time.Time     // when that tick was due, or the ticker was armed
	off      bool          // the connection is gone: nothing arms the ticker again

	// tickMu is held by a running tick, and guards the following: a tick
	// armed again while one runs (a shorter interval) waits for it.
	tickMu   sync.Mutex
	hb       frame.Heartbeat
	quiet    []uint64      // beat's calls that All stands for
	lastLate time.Duration // how late the previous tick ran

	// Owned by the goroutine reading conn's frames (acknowledge); one
	// that takes over from a handler run inline starts after it.
	ack frame.Ack

	// Until allUntil, and while no handler reports progress (the server's
	// progressed stays at allEpoch), a walk of calls would find what the
	// last one found: All stands for every call, and none has anything to
	// list. The tick then sends All without the walk, which with 10,000
	// held operations held the server's lock for milliseconds each
	// interval, and without taking the lock at all: on a saturated node
	// the lock is contended, and a heartbeat that waits for it is late
	// (waits of over 300 ms were measured at 256 callers on two cores),
	// which the client reads as a dead node. allUntil is the earliest
	// time a call may leave its queue (queuedUntil, which no handler
	// deadline comes before), UnixNano; zero means the next tick walks.
	// Written with s.mu held, read without.
	allUntil atomic.Int64
	allEpoch atomic.Uint64
	// Until vouchUntil, All stands for every call on the connection even
	// if some have progress to report: the tick sends All without the
	// walk when it finds the server's lock held, and the progress waits
	// for a tick that gets the lock. A tick that waited for the lock
	// instead was late by the wait, which under load (every arrival,
	// result and replicated apply takes the lock) was measured at 37 to
	// 95 ms: with the ticker's own lateness, more than the client's
	// heartbeat timeout. Like allUntil it ends at the earliest time a
	// call may leave its queue, so nothing the walk would expire or stop
	// heartbeating is vouched for a tick longer than without it; zero
	// when a call All does not stand for waits. Written with s.mu held,
	// read without.
	vouchUntil atomic.Int64
}

// forget drops call, which left the connection. Called with s.mu held.
func (sc *serverConn) forget(call uint64) {
	delete(sc.calls, call)
	if len(sc.calls) == 0 {
		sc.allUntil.Store(0) // nothing to vouch for: the next tick stops the ticker
	}
}

// joined keeps the tick's shortcut valid for a waiter just added for an
// attempt of e, or drops it: an attempt All does not stand for must be
// listed, and progress made before it joined must be sent to it. Called
// with s.mu held.
func (sc *serverConn) joined(e *execution, w waiter) {
	if !w.all {
		sc.vouchUntil.Store(0)
	} else if t := sc.queuedUntil(e).UnixNano(); t < sc.vouchUntil.Load() {
		sc.vouchUntil.Store(t)
	}
	if !w.all || e.progress.version.Load() != 0 {
		sc.allUntil.Store(0)
		return
	}
	if t := sc.queuedUntil(e).UnixNano(); t < sc.allUntil.Load() {
		sc.allUntil.Store(t)
	}
}

// queuedUntil is when a tick expires e if it is still queued or held: an
// interval before its time ends, so that the tick before that end finds it
// and its client hears that it never started. Called with s.mu held.
func (sc *serverConn) queuedUntil(e *execution) time.Time {
	return e.expires().Add(-sc.interval)
}

// acknowledge tells the client that attempt a arrived and waits here, if
// the client reads acks. It is called by the connection's read goroutine
// with s.mu held, before the attempt can run, so the ack is queued ahead
// of the result. Where the connection can, it is only queued: a quick
// result carries it in the same write, and the acks of a batch of attempts
// go out together once the batch is read.
func (sc *serverConn) acknowledge(a *frame.Attempt) {
	if a.Flags&frame.FlagAck == 0 {
		return
	}
	sc.ack.Call = a.Call
	if sc.inline == nil {
		sc.s.send(sc.conn, &sc.ack)
		return
	}
	if err := sc.inline.Queue(&sc.ack); err != nil {
		sc.s.cfg.Logger.Warn("ffgen: server could not send", "type", sc.ack.Type(), "peer", sc.conn.Peer().Node, "err", err)
	}
}

// vouchesWithoutLock reports whether a tick at now may send All without
// the walk when the server's lock is held (vouchUntil).
func (sc *serverConn) vouchesWithoutLock(now time.Time) bool {
	return now.UnixNano() < sc.vouchUntil.Load()
}

// startHeartbeats is called with s.mu held, for every attempt that waits.
func (sc *serverConn) startHeartbeats(interval time.Duration) {
	if sc.ticking && interval >= sc.interval {
		return // the common case, without armMu
	}
	sc.armMu.Lock()
	defer sc.armMu.Unlock()
	now := time.Now()
	due := now.Add(sc.s.tickPeriod(interval, now))
	sc.interval = interval
	if sc.ticking && !due.Before(sc.due) {
		return
	}
	sc.ticking = true
	sc.due, sc.prevRun, sc.prevDue = due, now, now
	if sc.ticker == nil {
		sc.ticker = time.AfterFunc(due.Sub(now), sc.tick)
		return
	}
	sc.ticker.Reset(due.Sub(now))
}

// stopHeartbeats is called with s.mu held.
func (sc *serverConn) stopHeartbeats() {
	sc.ticking = false
	sc.armMu.Lock()
	sc.off = true
	if sc.ticker != nil {
		sc.ticker.Stop()
	}
	sc.armMu.Unlock()
}

// tick heartbeats the connection's attempts, and arms the next tick an
// interval after this one was due, or busyPeriod of it while the node's
// ticks run late: the ticks keep their cadence, as a time.Ticker's do.
func (sc *serverConn) tick() {
	sc.tickMu.Lock()
	defer sc.tickMu.Unlock()
	now := time.Now()
	sc.armMu.Lock()
	due, prevRun, prevDue, off := sc.due, sc.prevRun, sc.prevDue, sc.off
	sc.armMu.Unlock()
	if off || now.Before(due) {
		// The connection is gone, or this firing was overtaken: the
		// ticker was armed again, for a tick that comes.
		return
	}
	// Late by how much further apart than their dues this tick and the
	// previous one ran: what the client sees between two heartbeats.
	sc.s.tickLate.record(now, sc.busyLate(now.Sub(prevRun)-due.Sub(prevDue)))
	if !sc.beat(now) {
		return
	}
	sc.armMu.Lock()
	defer sc.armMu.Unlock()
	if sc.off || !sc.due.Equal(due) {
		return // armed meanwhile, for a shorter interval
	}
	p := sc.s.tickPeriod(sc.interval, now)
	next := due.Add(p)
	if !next.After(now) {
		// Late by a whole period or more (a frozen process): the next
		// tick comes a period after this one, not at once.
		next = now.Add(p)
	}
	sc.due, sc.prevRun, sc.prevDue = next, now, due
	sc.ticker.Reset(time.Until(next))
}

// tickPeriod is how often a connection whose client asked for heartbeats
// every interval is heartbeated, as of now: every interval, or, while the
// node's ticks have run late lately (lateness) by an eighth of it or
// more, and by busyLateness at least, three times as often. A client
// times a node out a heartbeat timeout after its last heartbeat, and the
// timeout is often about twice the interval (200 and 90 ms by default):
// a tick that runs late by more than the difference, behind a collection
// or a snapshot on a saturated node, fails the node over though it was
// only busy. On two cores under 256 callers, ticks ran 110 to 130 ms late
// now and then, beyond the 110 ms the defaults leave; at a third of the
// interval they leave 170. A node whose ticks run on time heartbeats at
// the interval, and a stop of it is detected as fast as ever.
func (s *Server) tickPeriod(interval time.Duration, now time.Time) time.Duration {
	if s.tickLate.recent(now) >= max(interval/8, busyLateness) {
		return max(interval/busyPeriod, minHeartbeatInterval)
	}
	return interval
}

// busyPeriod divides the heartbeat interval of a busy node (tickPeriod).
const busyPeriod = 3

// busyLateness is the least lateness that makes a node busy whatever its
// interval: an idle virtual machine wakes a sleeping core a millisecond or
// two late, and a client that asked for 10 ms heartbeats would have its
// node heartbeat every 3 ms, its ticks then late by their own wake-ups,
// and a stop detected later (a 25 ms timeout's p99 49 against 30 ms).
const busyLateness = 10 * time.Millisecond

// busyLate returns how late the ticks ran, a tick late by late just now,
// as a sign that the node is busy: the lesser of this tick's lateness and
// the previous one's. A busy node's ticks run late one after another; a
// node that was frozen and continued (SIGSTOP, a paused VM) runs one tick
// late by the whole freeze and the next on time, and must not be waited
// for longer the next time it stops (connWatch.allowance). Called by a
// tick.
func (sc *serverConn) busyLate(late time.Duration) time.Duration {
	busy := min(late, sc.lastLate)
	sc.lastLate = late
	return busy
}

// lateness is how late a node's heartbeat ticks have run lately: the most
// any tick ran late in the current window of lateWindow and the one
// before. A tick is late by how much more than the interval passed since
// the connection's previous one: on a saturated node a tick's goroutine
// waits for a core behind the handlers and readers, and the
// client sees its heartbeats that much further apart. Each heartbeat
// carries it (Heartbeat.Late), so that the client allows for a node that
// is busy, not dead; a node whose ticks run on time tells nothing, and
// its client's detection of a stop is as fast as ever. Every connection's
// ticker records into one, without a lock.
type lateness struct {
	// Each slot packs a window's number (the upper 32 bits) and the most
	// a tick was late in it, in microseconds; slot i holds the windows
	// whose number has parity i.
	slots [2]atomic.Uint64
}

// lateWindow is how long a late tick is remembered, at least (at most
// twice that).
const lateWindow = time.Second

// record notes a tick late by late at now.
func (l *lateness) record(now time.Time, late time.Duration) {
	us := late.Microseconds()
	if us <= 0 {
		return
	}
	us = min(us, 1<<32-1)
	w := uint64(now.UnixNano()/int64(lateWindow)) & (1<<32 - 1)
	slot := &l.slots[w&1]
	for {
		old := slot.Load()
		if old>>32 == w && old&(1<<32-1) >= uint64(us) {
			return
		}
		if slot.CompareAndSwap(old, w<<32|uint64(us)) {
			return
		}
	}
}

// recent is the most a tick was late in the current window and the one
// before, as of now.
func (l *lateness) recent(now time.Time) time.Duration {
	w := uint64(now.UnixNano()/int64(lateWindow)) & (1<<32 - 1)
	var us uint64
	for i := range l.slots {
		v := l.slots[i].Load()
		if n := v >> 32; n == w || n == (w-1)&(1<<32-1) {
			us = max(us, v&(1<<32-1))
		}
	}
	return time.Duration(us) * time.Microsecond
}

// beat sends one heartbeat frame for every live attempt on the connection.
// It returns false, having stopped the ticker, when there are none.
//
// A client that set frame.FlagAllBeat hears of its attempts through
// the frame's All: one flag, however many attempts wait, where a list
// would cost both ends a lookup per attempt per interval. Such an attempt
// is listed only when it has progress to report.
//
// An attempt whose handler overran its attempt timeout is heartbeated no
// more, so that its client times it out even if the handler ignores its
// context; the server may have cut the timeout short (MaxAttemptTimeout),
// so the client's own timer may be far off. All would still stand for it:
// while one such attempt of an All client waits on the connection, the
// others are listed one by one instead.
//
// A tick that finds the server's lock held sends All without waiting for
// it, while All stands for every call on the connection (vouchUntil): busy
// is not dead.
//
// Toward a client that reads it, each heartbeat says how late the node's
// ticks have run lately (lateness).
func (sc *serverConn) beat(now time.Time) bool {
	s := sc.s
	if sc.tellsLate {
		sc.hb.Late = s.tickLate.recent(now)
	}
	if until := sc.allUntil.Load(); now.UnixNano() < until && s.progressed.Load() == sc.allEpoch.Load() {
		// The shortcut, without the lock: a call that joins or leaves
		// meanwhile changes what the next tick sends, as it would
		// had it come just after this one.
		sc.hb.Items, sc.hb.All = sc.hb.Items[:0], true
		s.send(sc.conn, &sc.hb)
		return true
	}
	if !s.mu.TryLock() {
		if sc.vouchesWithoutLock(now) {
			sc.hb.Items, sc.hb.All = sc.hb.Items[:0], true
			s.send(sc.conn, &sc.hb)
			return true
		}
		s.mu.Lock()
	}
	if len(sc.calls) == 0 {
		// All over no calls vouches for nothing: the connection's next
		// All attempt sets the bound (joined).
		sc.vouchUntil.Store(math.MaxInt64)
		sc.ticking = false
		s.mu.Unlock()
		return false
	}
	epoch := s.progressed.Load()
	items, quiet := sc.hb.Items[:0], sc.quiet[:0]
	all, overran, unvouched := false, false, false
	until := time.Time{}
	for call, e := range sc.calls {
		if (e.state == stateQueued || e.state == stateHeld) && !e.scatter && !now.Before(sc.queuedUntil(e)) {
			// Still queued behind a slow operation when its time ends
			// before the next tick: it leaves the queue now, rather than
			// pile up behind a handler that may never return, and its
			// client hears that it never started before its own timer
			// gives up on it without knowing.
			s.expire(e, "attempt expired while queued")
			continue
		}
		if t := sc.queuedUntil(e); until.IsZero() || t.Before(until) {
			until = t
		}
		var w *waiter
		if i := e.waiterAt(sc, call); i >= 0 {
			w = &e.waiters[i]
		}
		vouched := w != nil && w.all
		unvouched = unvouched || !vouched
		if !e.deadline.IsZero() && now.After(e.deadline) {
			overran = overran || vouched
			continue
		}
		it := frame.HeartbeatItem{Call: call}
		if w != nil {
			it.Progress, w.progress = e.progress.since(w.progress)
		}
		if vouched {
			all = true
			if it.Progress == nil {
				quiet = append(quiet, call)
				continue
			}
		}
		items = append(items, it)
	}
	if overran {
		for _, call := range quiet {
			items = append(items, frame.HeartbeatItem{Call: call})
		}
		all = false
	}
	sc.allUntil.Store(0)
	sc.allEpoch.Store(epoch)
	if all && !unvouched && len(sc.calls) > 0 {
		sc.allUntil.Store(until.UnixNano())
	}
	switch {
	case unvouched || overran:
		sc.vouchUntil.Store(0)
	case len(sc.calls) == 0:
		sc.vouchUntil.Store(math.MaxInt64)
	default:
		sc.vouchUntil.Store(until.UnixNano())
	}
	sc.hb.Items, sc.hb.All, sc.quiet = items, all, quiet
	s.mu.Unlock()
	if len(items) > 0 || all {
		s.send(sc.conn, &sc.hb)
	}
	clear(items) // drop progress references
	return true
}
