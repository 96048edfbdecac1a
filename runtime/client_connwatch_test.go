package runtime

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/transport"
)

// fakeConn stands for a connection the leg table only compares and keys.
type fakeConn struct {
	transport.Conn
	id int
}

func alarmLeg(t *legTable, conn transport.Conn, call uint64, hbTimeout time.Duration) *leg {
	l := &leg{call: call, conn: conn, wake: make(chan struct{}, 1), done: make(chan legEvent, 1), heartbeatTimeout: hbTimeout}
	l.beat.Store(time.Now().UnixNano())
	t.add(l)
	return l
}

// sleepUntil sleeps, in a synctest bubble, until start+d, and until what
// the alarm woke has run.
func sleepUntil(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d)))
	synctest.Wait()
}

// wokenExactlyAt checks that l's owner is woken at start+d and not a
// nanosecond before.
func wokenExactlyAt(t *testing.T, l *leg, start time.Time, d time.Duration) {
	t.Helper()
	sleepUntil(start, d-time.Nanosecond)
	if woken(l) {
		t.Fatalf("leg %d woken before %v", l.call, d)
	}
	sleepUntil(start, d)
	if !woken(l) {
		t.Fatalf("leg %d not woken at %v", l.call, d)
	}
}

// alarmTable is a leg table, a connection for its legs, and the time the
// test starts.
func alarmTable() (*legTable, *fakeConn, time.Time) {
	lt := new(legTable)
	lt.init()
	return lt, &fakeConn{id: 1}, time.Now()
}

func woken(l *leg) bool {
	select {
	case <-l.wake:
		return true
	default:
		return false
	}
}

// The connection's alarm wakes each leg's owner exactly when that leg's
// own heartbeat deadline passes, once per heartbeat, whatever timeouts
// the other legs on the connection have; a heartbeat in time keeps it
// asleep.
func TestConnAlarmWakesEachLegAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lt, conn, start := alarmTable()
		short := alarmLeg(lt, conn, 1, 100*time.Millisecond)
		long := alarmLeg(lt, conn, 2, 250*time.Millisecond)
		beaten := alarmLeg(lt, conn, 3, 250*time.Millisecond)
		check := func(when string, l *leg, want bool) {
			t.Helper()
			if got := woken(l); got != want {
				t.Errorf("%s: leg %d woken %v, want %v", when, l.call, got, want)
			}
		}

		sleepUntil(start, 100*time.Millisecond-time.Nanosecond)
		check("before 100ms", short, false)
		sleepUntil(start, 100*time.Millisecond)
		check("at 100ms", short, true)
		check("at 100ms", long, false)

		sleepUntil(start, 200*time.Millisecond)
		lt.beat(conn, []frame.HeartbeatItem{{Call: 3}}, time.Now().UnixNano())
		sleepUntil(start, 250*time.Millisecond-time.Nanosecond)
		check("before 250ms", long, false)
		sleepUntil(start, 250*time.Millisecond)
		check("at 250ms", long, true)
		check("at 250ms", beaten, false)
		check("at 250ms, once per heartbeat", short, false)

		sleepUntil(start, 450*time.Millisecond)
		check("at 450ms", beaten, true)

		// A leg woken already, whose heartbeat came later: the alarm found
		// no deadline ahead and is not armed, so the owner re-arms it.
		sleepUntil(start, 500*time.Millisecond)
		beaten.beat.Store(time.Now().UnixNano())
		beaten.rewatch()
		sleepUntil(start, 750*time.Millisecond-time.Nanosecond)
		check("before 750ms", beaten, false)
		sleepUntil(start, 750*time.Millisecond)
		check("at 750ms", beaten, true)

		// A connection with no legs left loses its alarm.
		for _, l := range []*leg{short, long, beaten} {
			lt.remove(l)
		}
		sleepUntil(start, time.Second)
		l := alarmLeg(lt, conn, 4, 100*time.Millisecond)
		sleepUntil(start, time.Second+100*time.Millisecond)
		check("a leg after the alarm was dropped", l, true)
		lt.remove(l)
		sleepUntil(start, 2*time.Second)
		if _, ok := lt.watches.Load(conn); ok {
			t.Error("the alarm of a connection with no legs is still kept")
		}
	})
}

// 1,000 attempts whose heartbeats come every interval: no owner is woken.
func TestConnAlarmSleepsThroughHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := DefaultSettings()
		var lt legTable
		lt.init()
		conn := &fakeConn{id: 1}
		legs := make([]*leg, 1000)
		items := make([]frame.HeartbeatItem, len(legs))
		for i := range legs {
			legs[i] = alarmLeg(&lt, conn, uint64(i+1), s.HeartbeatTimeout)
			items[i].Call = uint64(i + 1)
		}
		for range 20 {
			time.Sleep(s.HeartbeatInterval)
			lt.beat(conn, items, time.Now().UnixNano())
		}
		synctest.Wait()
		for _, l := range legs {
			if woken(l) {
				t.Fatalf("leg %d woken although its heartbeats came", l.call)
			}
		}
		time.Sleep(s.HeartbeatTimeout)
		synctest.Wait()
		for _, l := range legs {
			if !woken(l) {
				t.Fatalf("leg %d not woken a heartbeat timeout after the last heartbeat", l.call)
			}
			lt.remove(l)
		}
	})
}

// A heartbeat for all of a connection stands for each leg the server
// named before it, by an ack or an item, and for no other: not for a leg
// it has not acknowledged, which may not have arrived, nor for one that a
// redirect moved to the connection and that its server has not named yet.
func TestConnAlarmAllBeatsStandForNamedLegsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		var lt legTable
		lt.init()
		conn, other := &fakeConn{id: 1}, &fakeConn{id: 2}
		start := time.Now()
		acked := alarmLeg(&lt, conn, 1, timeout)
		unacked := alarmLeg(&lt, conn, 2, timeout)
		moved := alarmLeg(&lt, other, 3, timeout)
		sleepUntil(start, 10*time.Millisecond)
		lt.ack(conn, 1, time.Now().UnixNano())
		lt.ack(other, 3, time.Now().UnixNano())
		sleepUntil(start, 50*time.Millisecond)
		lt.moveTo(moved, conn) // as a redirect does
		moved.beat.Store(time.Now().UnixNano())
		moved.rewatch()
		for d := 20 * time.Millisecond; d <= 300*time.Millisecond; d += 20 * time.Millisecond {
			sleepUntil(start, d)
			if w := lt.watchOf(conn); w != nil {
				w.beat.Store(time.Now().UnixNano())
			}
		}
		if !woken(unacked) {
			t.Error("a leg the server never named was kept alive by heartbeats for all of its connection")
		}
		if !woken(moved) {
			t.Error("a leg moved to the connection was kept alive by its heartbeats for all before its new server named it")
		}
		if woken(acked) {
			t.Fatal("an acknowledged leg was woken although heartbeats for all of its connection came every 20ms")
		}
		wokenExactlyAt(t, acked, start, 400*time.Millisecond) // a heartbeat timeout after the last heartbeat for all
		for _, l := range []*leg{acked, unacked, moved} {
			lt.remove(l)
		}
	})
}

// While heartbeats for all of a connection keep coming, the alarm looks
// only at the legs the server has not named, and those still wake at their
// own deadlines; once the heartbeats stop, each named leg wakes exactly at
// the last one plus its own heartbeat timeout, whatever the other legs'
// timeouts are.
func TestConnAlarmNamedLegsWakeWhenAllBeatsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lt, conn, start := alarmTable()
		short := alarmLeg(lt, conn, 1, 100*time.Millisecond)
		long := alarmLeg(lt, conn, 2, 250*time.Millisecond)
		lt.ack(conn, 1, time.Now().UnixNano())
		lt.ack(conn, 2, time.Now().UnixNano())
		var unnamed *leg
		for i := 1; i <= 20; i++ {
			sleepUntil(start, time.Duration(i)*50*time.Millisecond)
			if w := lt.watchOf(conn); w != nil {
				w.beat.Store(time.Now().UnixNano())
			}
			if i == 10 {
				unnamed = alarmLeg(lt, conn, 3, 100*time.Millisecond) // sent at 500ms, never acknowledged
			}
		}
		for _, l := range []*leg{short, long} {
			if woken(l) {
				t.Fatalf("leg %d woken while heartbeats for all came", l.call)
			}
		}
		if !woken(unnamed) {
			t.Fatal("a leg the server never named was not woken by its deadline, 100ms after it was sent, while heartbeats for all came")
		}
		if w, _ := lt.watches.Load(conn); w.(*connWatch).named == nil {
			t.Fatal("the named legs are not in the alarm's named list")
		}

		// The last heartbeat for all came at 1s.
		wokenExactlyAt(t, short, start, 1100*time.Millisecond)
		wokenExactlyAt(t, long, start, 1250*time.Millisecond)
		for _, l := range []*leg{short, long, unnamed} {
			lt.remove(l)
		}
	})
}

// Busy is not dead: a frame of any kind from the connection keeps a leg
// the server has not named yet alive (the node reads the connection in
// order, and is alive), and keeps a named leg alive while the last
// heartbeat stood for all the named ones. Once the frames stop, each leg
// wakes a heartbeat timeout after the last; a heartbeat without All (the
// server lists its attempts because one overran) stops frames counting
// for the named legs.
func TestConnAlarmAnyFrameProvesTheNodeAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lt, conn, start := alarmTable()
		const timeout = 100 * time.Millisecond
		unnamed := alarmLeg(lt, conn, 1, timeout)
		named := alarmLeg(lt, conn, 2, timeout)
		lt.ack(conn, 2, time.Now().UnixNano())
		w := lt.watchOf(conn)
		w.beat.Store(time.Now().UnixNano())
		w.vouched.Store(true)
		// The ticker stops (a starved node), answers to other attempts
		// keep coming every 40 ms.
		for d := 40 * time.Millisecond; d <= 400*time.Millisecond; d += 40 * time.Millisecond {
			sleepUntil(start, d)
			w.frame.Store(time.Now().UnixNano())
		}
		if woken(unnamed) || woken(named) {
			t.Fatal("a leg was woken although frames from its node came every 40ms")
		}
		// A heartbeat that lists the attempts instead of All: the frames
		// no longer stand for the named leg, whose last heartbeat was at
		// the start; it is due at once.
		w.vouched.Store(false)
		sleepUntil(start, 410*time.Millisecond)
		named.rewatch()
		sleepUntil(start, 410*time.Millisecond)
		if !woken(named) {
			t.Error("a named leg was kept alive by frames after its server stopped vouching for all of them")
		}
		if woken(unnamed) {
			t.Fatal("the unnamed leg was woken before a heartbeat timeout passed after the last frame")
		}
		wokenExactlyAt(t, unnamed, start, 400*time.Millisecond+timeout)
		lt.remove(unnamed)
		lt.remove(named)
	})
}

// Busy is not dead: a node that says its heartbeat ticks have run late
// lately (Heartbeat.Late) is waited for twice its lateness beyond a
// quarter of the timeout longer, up to one more timeout; one whose ticks
// run on time, or late by less than a quarter of the timeout, is woken
// for at the timeout as before, so the detection of a stopped node does
// not move.
func TestConnAlarmAllowsForTheNodesLateness(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, c := range []struct {
		late, wake time.Duration
	}{
		{0, timeout},
		{timeout / 4, timeout},
		{100 * time.Millisecond, timeout + 100*time.Millisecond},
		{150 * time.Millisecond, 2 * timeout},
		{190 * time.Millisecond, 2 * timeout},
		// Ticks a whole timeout late: the node was frozen, not busy (as
		// after a SIGSTOP and SIGCONT), and gets no allowance.
		{timeout, timeout},
		{time.Second, timeout},
	} {
		synctest.Test(t, func(t *testing.T) {
			lt, conn, start := alarmTable()
			l := alarmLeg(lt, conn, 1, timeout)
			lt.ack(conn, 1, start.UnixNano())
			w := lt.watchOf(conn)
			w.beat.Store(start.UnixNano())
			w.late.Store(int64(c.late))
			l.rewatch()
			wokenExactlyAt(t, l, start, c.wake)
			if got := time.Unix(0, l.beatDeadline(w)).Sub(start); got != c.wake {
				t.Errorf("late %v: heartbeat deadline %v after the last heartbeat, want %v", c.late, got, c.wake)
			}
			lt.remove(l)
		})
	}
}
