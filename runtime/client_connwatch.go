package runtime

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// A connWatch is the heartbeat alarm of one connection: one timer, armed
// at the earliest heartbeat deadline among the legs waiting on it. A
// heartbeat only stores the time in its leg; the deadlines it moves are
// read when the alarm fires. A timer per attempt would instead fire once
// per heartbeat timeout for every attempt in flight just to find its
// deadline moved, 50,000 wakeups a second for 10,000 long operations.
type connWatch struct {
	// Set when the watch is made, read only after.
	conn  transport.Conn
	timer *time.Timer // runs fire

	// Stored by the connection's read goroutine, loaded by the alarm and
	// the legs' owners.
	//
	// beat is when the last heartbeat for the whole connection arrived,
	// UnixNano: it stands for every leg the server named before it
	// (leg.lastBeat).
	beat atomic.Int64
	// frame is when the last frame of any kind arrived on conn, UnixNano,
	// and vouched whether the last heartbeat stood for every leg named
	// (it had All; taken as true until the first comes, a heartbeat
	// interval at most). A frame proves the node alive and working on conn: a
	// saturated node's ticker may run late, and its reader may not have
	// read an attempt yet, while answers keep coming (leg.lastBeat).
	frame   atomic.Int64
	vouched atomic.Bool
	// late is how late the node said its heartbeat ticks have run lately,
	// in its last heartbeat on conn (Heartbeat.Late; zero from a node
	// that does not say): see allowance.
	late atomic.Int64

	mu sync.Mutex // guards the following, and the list links of its legs
	// The legs waiting on conn, linked by watchPrev and watchNext, in two
	// lists. fresh holds legs the server had not named when the alarm
	// last looked; named, those it had, whose deadlines a heartbeat for
	// all of conn moves together. While that heartbeat is recent enough
	// that no named leg can be past its deadline (beat + namedTimeout is
	// ahead), the alarm looks at the fresh legs only: with 10,000 held
	// operations on the connection, a walk of every leg each time it
	// fired held the lock that every call's leg takes for milliseconds.
	fresh, named *leg
	namedTimeout time.Duration // the shortest heartbeat timeout of a leg in named since it was last empty
	due          int64         // when the timer fires, UnixNano; noAlarm when it is not armed or is firing
	dead         bool          // removed from the table: it had no legs left when it fired
}

// empty reports whether no leg waits on the connection. Called with w.mu
// held.
func (w *connWatch) empty() bool { return w.fresh == nil && w.named == nil }

// link puts l at the head of the fresh or the named list. Called with
// w.mu held.
func (w *connWatch) link(l *leg, named bool) {
	head := &w.fresh
	if named {
		head = &w.named
		if w.named == nil || l.heartbeatTimeout < w.namedTimeout {
			w.namedTimeout = l.heartbeatTimeout
		}
	}
	l.watchNamed = named
	l.watchPrev, l.watchNext = nil, *head
	if *head != nil {
		(*head).watchPrev = l
	}
	*head = l
}

// unlink takes l out of its list. Called with w.mu held.
func (w *connWatch) unlink(l *leg) {
	if l.watchPrev != nil {
		l.watchPrev.watchNext = l.watchNext
	} else if l.watchNamed {
		w.named = l.watchNext
	} else {
		w.fresh = l.watchNext
	}
	if l.watchNext != nil {
		l.watchNext.watchPrev = l.watchPrev
	}
	l.watchPrev, l.watchNext = nil, nil
}

const noAlarm = math.MaxInt64

// watchConn links l into its connection's alarm, creating the alarm for
// the connection's first leg, and moves the alarm earlier if l's
// deadline comes first. Called with l's shard locked.
func (t *legTable) watchConn(l *leg) {
	for {
		v, ok := t.watches.Load(l.conn)
		if !ok {
			w := &connWatch{conn: l.conn, due: noAlarm}
			w.vouched.Store(true) // until a heartbeat lists attempts instead
			w.timer = time.AfterFunc(time.Hour, func() { t.fire(w) })
			w.timer.Stop()
			v, _ = t.watches.LoadOrStore(l.conn, w)
		}
		w := v.(*connWatch)
		w.mu.Lock()
		if w.dead { // it fired empty just now: the next one is the connection's
			w.mu.Unlock()
			continue
		}
		l.watch = w
		w.link(l, l.named.Load())
		w.armBy(l.beatDeadline(w), 0)
		w.mu.Unlock()
		return
	}
}

// unwatchConn unlinks l from its connection's alarm. The alarm is left
// armed: firing for no one costs one walk, less than moving it each time,
// and a connection that keeps being used keeps its alarm.
// Called with l's shard locked.
func (l *leg) unwatchConn() {
	w := l.watch
	if w == nil {
		return
	}
	w.mu.Lock()
	w.unlink(l)
	if w.empty() && w.due == noAlarm {
		// Nothing is left to fire for: fire once more all the same, to
		// drop the alarm unless a leg comes first.
		now := time.Now().UnixNano()
		w.armBy(now+int64(l.heartbeatTimeout), now)
	}
	w.mu.Unlock()
	l.watch = nil
}

// armBy makes the alarm fire by the deadline d at the latest; now is the
// time, or 0 to read the clock only if the alarm moves: on a connection
// in use the alarm is already due sooner, and the clock is read for
// nothing otherwise. Called with w.mu held.
func (w *connWatch) armBy(d, now int64) {
	if d >= w.due {
		return
	}
	if now == 0 {
		now = time.Now().UnixNano()
	}
	w.due = d
	w.timer.Reset(time.Duration(d - now))
}

// fire wakes the owner of every leg whose heartbeat deadline has passed,
// once per heartbeat it last had, and re-arms the alarm at the earliest
// deadline still ahead. A connection with no legs left loses its alarm.
// Fresh legs the server has named since move to the named list; the named
// list is walked only when the last heartbeat for all of the connection
// no longer covers it, and otherwise counts by its earliest possible
// deadline.
func (t *legTable) fire(w *connWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now().UnixNano()
	if w.empty() {
		w.dead = true
		w.due = noAlarm
		t.watches.CompareAndDelete(w.conn, w)
		return
	}
	next := int64(noAlarm)
	for l := w.fresh; l != nil; {
		following := l.watchNext
		if l.named.Load() {
			w.unlink(l)
			w.link(l, true)
		}
		next = min(next, w.check(l, now))
		l = following
	}
	if w.named != nil {
		beat := w.beat.Load()
		if w.vouched.Load() {
			beat = max(beat, w.frame.Load())
		}
		if covered := beat + int64(w.namedTimeout) + w.allowance(w.namedTimeout); covered > now {
			next = min(next, covered)
		} else {
			for l := w.named; l != nil; l = l.watchNext {
				next = min(next, w.check(l, now))
			}
		}
	}
	w.due = noAlarm
	if next != noAlarm {
		w.armBy(next, now)
	}
}

// check wakes l's owner if l's heartbeat deadline has passed, once per
// heartbeat it last had, and returns the deadline if it is still ahead,
// noAlarm if not. Called with w.mu held.
func (w *connWatch) check(l *leg, now int64) int64 {
	beat := l.lastBeat(w)
	d := beat + int64(l.heartbeatTimeout) + w.allowance(l.heartbeatTimeout)
	if d > now {
		return d
	}
	if l.alarmed != beat {
		l.alarmed = beat
		select {
		case l.wake <- struct{}{}:
		default: // an earlier wake is still unread: one is enough
		}
	}
	return noAlarm
}

// lastBeat is when the server last vouched for l, UnixNano: a heartbeat
// or ack naming it, or, once one has, a heartbeat for all of w, l's
// connection. Before the server named l, such a heartbeat may have left
// it before l arrived. w is passed in, not read from l: the alarm's
// goroutine calls this too.
//
// Busy is not dead: any frame from the node counts too. Before the
// server named l, a frame on w that arrived after l was sent shows the
// node alive and working through the connection, which it reads in
// order: l waits unread behind what came before it (on a saturated node
// the attempts of a batch wait for the reader, and their acks with
// them). After, a frame counts while the server's last heartbeat stood
// for every named leg (All): its ticker ran late, its answers did not.
// A node that stopped sends nothing, and is blamed a heartbeat timeout
// after its last frame as before; one that stopped heartbeating an
// attempt that overran lists the others and loses All, so the frames
// no longer count for it. The attempt timeout bounds the wait.
func (l *leg) lastBeat(w *connWatch) int64 {
	b := l.beat.Load()
	if w == nil {
		return b
	}
	if !l.named.Load() {
		return max(b, w.frame.Load())
	}
	b = max(b, w.beat.Load())
	if w.vouched.Load() {
		b = max(b, w.frame.Load())
	}
	return b
}

// beatDeadline is when l's heartbeat timeout ends unless a heartbeat
// comes first, UnixNano; w is l's connection's alarm (nil: none yet).
func (l *leg) beatDeadline(w *connWatch) int64 {
	d := l.lastBeat(w) + int64(l.heartbeatTimeout)
	if w != nil {
		d += w.allowance(l.heartbeatTimeout)
	}
	return d
}

// allowance is how much longer than a heartbeat timeout of timeout the
// node at the other end of w is waited for, in nanoseconds: busy is not
// dead. A node whose ticker has run late by L lately (it says so in its
// heartbeats) sends heartbeats up to an interval plus L apart, and L may
// grow while the load does; the timeout already allows for some
// lateness, and the node is given twice its lateness beyond a quarter of
// the timeout, up to one more timeout. A node whose ticks run on time (or
// late by under a quarter of the timeout, as beside other busy
// processes) gets none, so a stop of a node that was not overloaded is
// detected exactly as fast as before; one that stops while overloaded, at
// most a heartbeat timeout later. Nor does a node whose ticks ran a whole
// timeout late: its process did not run at all for that long (it was
// frozen, or stopped and continued), which is what the timeout is there to
// catch, and a node stopped again soon after must be caught as fast.
func (w *connWatch) allowance(timeout time.Duration) int64 {
	late := time.Duration(w.late.Load())
	if late >= timeout {
		return 0
	}
	return int64(min(max(2*late-timeout/2, 0), timeout))
}

// rewatch makes sure l's alarm covers its heartbeat deadline again after
// it woke the owner: a heartbeat that came since only stored the time,
// and an alarm that found no other deadline ahead is not armed. Called
// by l's owner.
func (l *leg) rewatch() {
	if w := l.watch; w != nil {
		w.mu.Lock()
		if !w.dead {
			w.armBy(l.beatDeadline(w), 0)
		}
		w.mu.Unlock()
	}
}
