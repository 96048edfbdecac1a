package runtime

import (
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
	peer frame.Hello
	late []time.Duration // of each heartbeat sent
}

func (c *beatConn) Peer() frame.Hello { return c.peer }
func (c *beatConn) Close() error      { return nil }

func (c *beatConn) Send(f frame.Frame) error {
	if hb, ok := f.(*frame.Heartbeat); ok {
		c.late = append(c.late, hb.Late)
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
