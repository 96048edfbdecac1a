package runtime

import (
	"bytes"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/transport"
)

// A node remembers how late its heartbeat ticks ran, the most of the
// current window and the one before, and forgets it after that: a node
// that was saturated a few seconds ago and is no longer tells its clients
// nothing, and their detection of a stop is as fast as ever.
func TestTickLatenessIsRememberedForAWindowOrTwo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lateness
		// Start on a window's edge, as the windows are counted from the
		// epoch.
		time.Sleep(time.Until(time.Now().Truncate(lateWindow).Add(lateWindow)))
		start := time.Now()
		if got := l.recent(start); got != 0 {
			t.Fatalf("recent %v before any late tick, want 0", got)
		}
		l.record(start, -time.Millisecond) // early: nothing
		l.record(start, 30*time.Millisecond)
		l.record(start, 10*time.Millisecond) // less than the most
		at := func(d time.Duration, want time.Duration) {
			t.Helper()
			if got := l.recent(start.Add(d)); got != want {
				t.Errorf("%v after the first late tick: recent %v, want %v", d, got, want)
			}
		}
		at(0, 30*time.Millisecond)
		l.record(start.Add(lateWindow), 20*time.Millisecond) // the next window
		at(lateWindow, 30*time.Millisecond)
		at(2*lateWindow-time.Nanosecond, 30*time.Millisecond)
		at(2*lateWindow, 20*time.Millisecond) // the first window is forgotten
		at(3*lateWindow, 0)
		l.record(start.Add(4*lateWindow), 150*time.Millisecond)
		at(4*lateWindow, 150*time.Millisecond)
	})
}

// beatConn is a client's connection as the server's ticker sees it: what
// the client said in its Hello, and the heartbeats sent to it.
type beatConn struct {
	transport.Conn
	peer  frame.Hello
	late  []time.Duration   // of each heartbeat sent
	beats []frame.Heartbeat // each heartbeat sent, its items copied
}

func (c *beatConn) Peer() frame.Hello { return c.peer }
func (c *beatConn) Close() error      { return nil }

func (c *beatConn) Send(f frame.Frame) error {
	if hb, ok := f.(*frame.Heartbeat); ok {
		c.late = append(c.late, hb.Late)
		cp := *hb
		cp.Items = append([]frame.HeartbeatItem(nil), hb.Items...)
		c.beats = append(c.beats, cp)
	}
	return nil
}

// Each heartbeat tells a client of revision 2 how late the node's ticks
// ran lately, and a client of an earlier revision nothing, since it would
// take the field for a malformed frame.
func TestHeartbeatSaysHowLateTheTicksRan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(ServerConfig{})
		defer s.Close()
		now := time.Now()
		s.tickLate.record(now, 120*time.Millisecond)
		for _, c := range []struct {
			revision uint32
			want     time.Duration
		}{{frame.Revision, 120 * time.Millisecond}, {1, 0}} {
			conn := &beatConn{peer: frame.Hello{Node: "client", Revision: c.revision}}
			s.mu.Lock()
			sc := s.connLocked(conn)
			s.mu.Unlock()
			sc.allUntil.Store(now.Add(time.Hour).UnixNano()) // All stands for its calls
			if !sc.beat(now) || len(conn.late) != 1 || conn.late[0] != c.want {
				t.Errorf("revision %d: heartbeats sent with lateness %v, want one with %v", c.revision, conn.late, c.want)
			}
		}
	})
}

// A tick's lateness counts as the node being busy only when the tick
// before ran late too: a node frozen and continued runs one tick late by
// the whole freeze, then on time, and that one tick must not make its
// clients wait longer the next time it stops.
func TestOneLateTickIsAFreezeNotLoad(t *testing.T) {
	var sc serverConn
	for i, c := range []struct{ late, busy time.Duration }{
		{0, 0},
		{2 * time.Second, 0}, // the first tick after a freeze
		{time.Millisecond, time.Millisecond},
		{80 * time.Millisecond, time.Millisecond}, // load starts
		{120 * time.Millisecond, 80 * time.Millisecond},
		{90 * time.Millisecond, 90 * time.Millisecond},
	} {
		if got := sc.busyLate(c.late); got != c.busy {
			t.Errorf("tick %d late by %v: busy %v, want %v", i, c.late, got, c.busy)
		}
	}
}

// A heartbeat tick does not wait for the server's lock while All stands for
// every call on the connection: under load every arrival, result and
// replicated apply takes that lock, and a tick that waited its turn was
// late by more than the client's heartbeat timeout. Progress waits for a
// tick that gets the lock. Once a call All does not stand for joins, or
// the earliest time a call may leave its queue has come, the tick waits
// for the lock and walks the calls as before.
//
// Not under synctest: a goroutine blocked on a mutex is not durably
// blocked, so a tick that waited for the lock would hang the bubble
// instead of failing the test. The ticks take their time as an argument;
// the only wall-clock wait is the bound on a tick that should return at
// once.
func TestHeartbeatDoesNotWaitForTheServerLock(t *testing.T) {
	s := NewServer(ServerConfig{})
	defer s.Close()
	conn := &beatConn{peer: frame.Hello{Node: "client", Revision: frame.Revision}}
	start := time.Now()
	s.mu.Lock()
	sc := s.connLocked(conn)
	// The test ticks by hand: a ticker the waiters would start must not
	// tick too: with ticking set and no tick due, the waiters arm none.
	sc.ticking, sc.interval = true, time.Hour
	held := &execution{s: s, arrived: start, timeout: 10 * time.Second, state: stateRunning}
	held.deadline = held.expires()
	held.addWaiter(sc, &frame.Attempt{Call: 1, Flags: frame.FlagAck | frame.FlagAllBeat})
	s.mu.Unlock()

	if sc.vouchesWithoutLock(start) {
		t.Fatal("vouched without the lock before a tick walked the calls")
	}
	if !sc.beat(start) || len(conn.beats) != 1 || !conn.beats[0].All || len(conn.beats[0].Items) != 0 {
		t.Fatalf("first tick sent %+v, want one heartbeat with All and no items", conn.beats)
	}
	// Progress turns off the shortcut of a quiet connection: before this
	// change, the tick then waited for the lock.
	held.setProgress([]byte("half"))
	s.mu.Lock()
	done := make(chan bool)
	go func() { done <- sc.beat(start.Add(time.Second)) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("the ticker stopped")
		}
	case <-time.After(10 * time.Second):
		s.mu.Unlock()
		<-done
		t.Fatal("the tick waited for the server's lock")
	}
	s.mu.Unlock()
	if len(conn.beats) != 2 || !conn.beats[1].All || len(conn.beats[1].Items) != 0 {
		t.Fatalf("tick with the lock held sent %+v, want a second heartbeat with All and no items", conn.beats)
	}
	// The next tick that gets the lock reports the progress.
	sc.beat(start.Add(2 * time.Second))
	if last := conn.beats[len(conn.beats)-1]; !last.All || len(last.Items) != 1 || last.Items[0].Call != 1 || !bytes.Equal(last.Items[0].Progress, []byte("half")) {
		t.Errorf("tick after the lock was free sent %+v, want All and call 1's progress", last)
	}

	until := sc.queuedUntil(held)
	if !sc.vouchesWithoutLock(until.Add(-time.Nanosecond)) || sc.vouchesWithoutLock(until) {
		t.Errorf("vouches without the lock until %v: want until the call may leave its queue", until)
	}
	// A call of a client that does not read All must be listed.
	s.mu.Lock()
	other := &execution{s: s, arrived: start, timeout: 10 * time.Second, state: stateRunning}
	other.deadline = other.expires()
	other.addWaiter(sc, &frame.Attempt{Call: 2, Flags: frame.FlagAck})
	s.mu.Unlock()
	if sc.vouchesWithoutLock(start.Add(3 * time.Second)) {
		t.Error("vouches without the lock for a call All does not stand for")
	}
	s.mu.Lock()
	other.removeWaiter(sc, 2)
	held.removeWaiter(sc, 1)
	s.mu.Unlock()
	// With no calls left, All vouches for nothing until one joins.
	sc.beat(start.Add(4 * time.Second))
	if !sc.vouchesWithoutLock(start.Add(time.Hour)) {
		t.Error("a connection without calls: the tick would wait for the lock")
	}
	s.mu.Lock()
	held.addWaiter(sc, &frame.Attempt{Call: 3, Flags: frame.FlagAck | frame.FlagAllBeat})
	s.mu.Unlock()
	if sc.vouchesWithoutLock(until) {
		t.Errorf("vouches past %v, when the new call may leave its queue", until)
	}
}

// countConn counts the heartbeats sent on it, from the ticks.
type countConn struct {
	beatConn
	mu    sync.Mutex
	beats int
}

func (c *countConn) Send(f frame.Frame) error {
	if _, ok := f.(*frame.Heartbeat); ok {
		c.mu.Lock()
		c.beats++
		c.mu.Unlock()
	}
	return nil
}

func (c *countConn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.beats
}

// No goroutine waits for a connection's next tick: a connection whose
// attempts wait is heartbeated at the interval by a timer, and a
// goroutine runs only while a tick does. Each used to keep a goroutine
// (and its stack) for as long as it had attempts and eight ticks after.
func TestNoGoroutineWaitsBetweenTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(ServerConfig{})
		defer s.Close()
		const interval, conns = 90 * time.Millisecond, 20
		start := time.Now()
		var cs []*countConn
		s.mu.Lock()
		held := &execution{s: s, arrived: start, timeout: time.Hour, state: stateRunning}
		held.deadline = held.expires()
		for i := range conns {
			conn := &countConn{beatConn: beatConn{peer: frame.Hello{Node: "client", Revision: frame.Revision}}}
			cs = append(cs, conn)
			held.addWaiter(s.connLocked(conn), &frame.Attempt{Call: uint64(i + 1), Flags: frame.FlagAck | frame.FlagAllBeat, Heartbeat: interval})
		}
		s.mu.Unlock()

		time.Sleep(10*interval + interval/2)
		synctest.Wait()
		for i, c := range cs {
			if n := c.count(); n != 10 {
				t.Errorf("connection %d: %d heartbeats in %v, want 10 (every %v)", i, n, 10*interval+interval/2, interval)
			}
		}
		buf := make([]byte, 1<<20)
		if n := strings.Count(string(buf[:goruntime.Stack(buf, true)]), "(*serverConn).tick"); n != 0 {
			t.Errorf("%d goroutines in a connection's ticker between ticks, want none", n)
		}
		s.mu.Lock()
		for i, c := range cs {
			held.removeWaiter(s.conns[c], uint64(i+1))
		}
		s.mu.Unlock()
		time.Sleep(interval) // the next tick finds nothing, and stops the ticker
		synctest.Wait()
	})
}

// A node whose ticks run late heartbeats three times as often as its
// clients asked, so that one tick held up behind a collection or a
// snapshot does not leave a client without a heartbeat for longer than its
// timeout; a node whose ticks run on time heartbeats at the interval, and
// goes back to it once its ticks have run on time for a window or two.
func TestBusyNodeHeartbeatsMoreOften(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer(ServerConfig{})
		defer s.Close()
		const interval = 90 * time.Millisecond
		conn := &countConn{beatConn: beatConn{peer: frame.Hello{Node: "client", Revision: frame.Revision}}}
		start := time.Now()
		s.mu.Lock()
		sc := s.connLocked(conn)
		held := &execution{s: s, arrived: start, timeout: time.Hour, state: stateRunning}
		held.deadline = held.expires()
		held.addWaiter(sc, &frame.Attempt{Call: 1, Flags: frame.FlagAck | frame.FlagAllBeat, Heartbeat: interval})
		s.mu.Unlock()

		beatsIn := func(d time.Duration) int {
			n := conn.count()
			time.Sleep(d)
			synctest.Wait()
			return conn.count() - n
		}
		if n := beatsIn(900 * time.Millisecond); n != 10 {
			t.Errorf("ticks on time: %d heartbeats in 900ms, want 10 (every %v)", n, interval)
		}
		// Ticks late by a quarter of the interval, twice in a row: busy.
		s.tickLate.record(time.Now(), interval/4)
		beatsIn(interval) // the tick that finds the node busy
		if n := beatsIn(900 * time.Millisecond); n != 30 {
			t.Errorf("ticks late: %d heartbeats in 900ms, want 30 (every %v)", n, interval/busyPeriod)
		}
		// The lateness is forgotten after a window or two.
		time.Sleep(2 * lateWindow)
		if n := beatsIn(900 * time.Millisecond); n != 10 {
			t.Errorf("ticks on time again: %d heartbeats in 900ms, want 10", n)
		}
		s.mu.Lock()
		held.removeWaiter(sc, 1)
		s.mu.Unlock()
		time.Sleep(interval) // the next tick finds nothing, and stops the ticker
		synctest.Wait()
	})
}
