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
	conn  transport.Conn
	timer *time.Timer // runs fire
	// beat is when the last heartbeat for the whole connection arrived,
	// UnixNano: it stands for every leg the server named before it
	// (leg.lastBeat).
	beat atomic.Int64

	mu   sync.Mutex
	legs *leg  // the legs waiting on conn, linked by watchPrev and watchNext
	due  int64 // when the timer fires, UnixNano; noAlarm when it is not armed or is firing
	dead bool  // removed from the table: it had no legs left when it fired
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
		l.watchPrev, l.watchNext = nil, w.legs
		if w.legs != nil {
			w.legs.watchPrev = l
		}
		w.legs = l
		w.armBy(l.beatDeadline(w), time.Now().UnixNano())
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
	if l.watchPrev != nil {
		l.watchPrev.watchNext = l.watchNext
	} else {
		w.legs = l.watchNext
	}
	if l.watchNext != nil {
		l.watchNext.watchPrev = l.watchPrev
	}
	if w.legs == nil && w.due == noAlarm {
		// Nothing is left to fire for: fire once more all the same, to
		// drop the alarm unless a leg comes first.
		now := time.Now().UnixNano()
		w.armBy(now+int64(l.heartbeatTimeout), now)
	}
	w.mu.Unlock()
	l.watch, l.watchPrev, l.watchNext = nil, nil, nil
}

// armBy makes the alarm fire by the deadline d at the latest. Called with
// w.mu held.
func (w *connWatch) armBy(d, now int64) {
	if d >= w.due {
		return
	}
	w.due = d
	w.timer.Reset(time.Duration(d - now))
}

// fire wakes the owner of every leg whose heartbeat deadline has passed,
// once per heartbeat it last had, and re-arms the alarm at the earliest
// deadline still ahead. A connection with no legs left loses its alarm.
func (t *legTable) fire(w *connWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now().UnixNano()
	if w.legs == nil {
		w.dead = true
		w.due = noAlarm
		t.watches.CompareAndDelete(w.conn, w)
		return
	}
	next := int64(noAlarm)
	for l := w.legs; l != nil; l = l.watchNext {
		beat := l.lastBeat(w)
		d := beat + int64(l.heartbeatTimeout)
		if d > now {
			next = min(next, d)
			continue
		}
		if l.alarmed != beat {
			l.alarmed = beat
			select {
			case l.wake <- struct{}{}:
			default: // an earlier wake is still unread: one is enough
			}
		}
	}
	w.due = noAlarm
	if next != noAlarm {
		w.armBy(next, now)
	}
}

// lastBeat is when the server last vouched for l, UnixNano: a heartbeat
// or ack naming it, or, once one has, a heartbeat for all of w, l's
// connection. Before the server named l, such a heartbeat may have left
// it before l arrived. w is passed in, not read from l: the alarm's
// goroutine calls this too.
func (l *leg) lastBeat(w *connWatch) int64 {
	b := l.beat.Load()
	if w != nil && l.named.Load() {
		b = max(b, w.beat.Load())
	}
	return b
}

// beatDeadline is when l's heartbeat timeout ends unless a heartbeat
// comes first, UnixNano; w is l's connection's alarm.
func (l *leg) beatDeadline(w *connWatch) int64 {
	return l.lastBeat(w) + int64(l.heartbeatTimeout)
}

// rewatch makes sure l's alarm covers its heartbeat deadline again after
// it woke the owner: a heartbeat that came since only stored the time,
// and an alarm that found no other deadline ahead is not armed. Called
// by l's owner.
func (l *leg) rewatch() {
	if w := l.watch; w != nil {
		w.mu.Lock()
		if !w.dead {
			w.armBy(l.beatDeadline(w), time.Now().UnixNano())
		}
		w.mu.Unlock()
	}
}
