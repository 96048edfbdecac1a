package runtime

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/memnet"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The server's "handler stopped" answer and the client's attempt timer fire
// at the same instant; on a busy machine the answer can be read first. It
// must end the attempt as the timer would have: an attempt timeout, not a
// failover error. Over the network the timer nearly always wins, so the
// answer is put in front of it here.
func TestStoppedAnswerAtTheAttemptEndIsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := DefaultSettings()
		s.Groups = []string{"a", "b"}
		c := loneClient(t, s)
		m := &MethodDesc{Service: "svc", Name: "M"}
		op := &operation{c: c, m: m, s: s, start: time.Now(), deadline: time.Now().Add(s.OperationTimeout)}
		const timeout = time.Second
		time.Sleep(timeout) // the attempt's time is up
		p := &sent{start: op.start, out: outcome{member: Member{Name: "n1", Group: "a"}}, a: frame.Attempt{
			Call: 1, Timeout: timeout, Flags: frame.FlagScatter, // no cancel to send on the missing connection
		}}
		p.l.done = make(chan legEvent, 1)
		p.l.done <- legEvent{result: &frame.Result{Status: frame.StatusFailover, Code: codeTimeout, Message: "handler stopped: context deadline exceeded"}}
		o := op.await(context.Background(), p)
		if o.reason != ReasonAttemptTimeout || !c.Suspected("n1") {
			t.Errorf("reason %s, suspected %v; want attempt-timeout and n1 suspected", o.reason, c.Suspected("n1"))
		}

		// Before the attempt's end the same answer is the server's word: a
		// failover error (a shutdown, say).
		op.start = time.Now()
		p.start = op.start
		p.l.done <- legEvent{result: &frame.Result{Status: frame.StatusFailover, Code: codeTimeout, Message: "handler stopped: server shutting down"}}
		if o := op.await(context.Background(), p); o.reason != ReasonFailoverError {
			t.Errorf("reason %s for an early stop; want failover-error", o.reason)
		}
	})
}

// A leader that proposed a replicated write and then lost its leadership
// redirects the attempt to the new leader saying it may have run there;
// the new leader's refusal (for overload, say) speaks only for itself:
// the attempt ends refused, but not as one that ran nowhere, since the
// write may still commit.
func TestRefusalAfterARedirectThatMayHaveRunIsNotRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := DefaultSettings()
		s.Groups = []string{"a", "b"}
		c := loneClient(t, s)
		m := &MethodDesc{Service: "svc", Name: "M"}
		for _, ran := range []bool{false, true} {
			op := &operation{c: c, m: m, s: s, start: time.Now(), deadline: time.Now().Add(s.OperationTimeout)}
			p := &sent{start: op.start, out: outcome{member: Member{Name: "n2", Group: "a"}, delivery: Delivered}, a: frame.Attempt{
				Call: 1, Timeout: time.Second, Flags: frame.FlagScatter,
			}, ranSomewhere: ran}
			p.l.done = make(chan legEvent, 1)
			p.l.done <- legEvent{result: overloadResult(s.HeartbeatInterval, "64 operations waiting to start")}
			o := op.await(context.Background(), p)
			if o.reason != ReasonOverloaded {
				t.Fatalf("reason %s, want overloaded", o.reason)
			}
			if refused := o.delivery == Refused; refused == ran {
				t.Errorf("redirected by a node that may have run it: %v; delivery %v, want refused only if not", ran, o.delivery)
			}
		}
	})
}

// A heartbeat timeout whose timer fired late is re-checked: the client was
// descheduled, and the heartbeats may be unread in its socket. A frame
// that arrives meanwhile clears it; without one the node is blamed, after
// a grace as long as the lateness. A timer on time is believed at once.
// Timers in a bubble are never late, so the lateness is handed to expired
// here.
func TestLateHeartbeatTimeoutIsRechecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, c, watchFrom := heartbeatWatch(t, nil)

		// On time: a heartbeat timeout.
		w, timer := watchFrom()
		if o, ended := w.expired(context.Background(), timer, w.due); !ended || o.reason != ReasonHeartbeatTimeout {
			t.Fatalf("on time: ended %v, reason %s; want a heartbeat timeout", ended, o.reason)
		}

		// 5ms late, and a heartbeat arrives during the grace.
		w, timer = watchFrom()
		late := w.due.Add(5 * time.Millisecond)
		if _, ended := w.expired(context.Background(), timer, late); ended || w.due != late.Add(5*time.Millisecond) {
			t.Fatalf("5ms late: ended %v, re-armed for %v after; want a 5ms grace", ended, w.due.Sub(late))
		}
		w.l.beat.Store(late.Add(time.Millisecond).UnixNano())
		if _, ended := w.expired(context.Background(), timer, w.due); ended {
			t.Fatal("a heartbeat arrived during the grace, yet the attempt ended")
		}
		if want := late.Add(time.Millisecond + s.HeartbeatTimeout); w.due != want {
			t.Errorf("re-armed for %v, want the new heartbeat deadline %v", w.due, want)
		}

		// An interval late, and nothing arrives: blamed after an interval
		// of grace.
		w, timer = watchFrom()
		late = w.due.Add(s.HeartbeatInterval)
		if _, ended := w.expired(context.Background(), timer, late); ended || w.due.Sub(late) != s.HeartbeatInterval {
			t.Fatalf("an interval late: ended %v, grace %v; want %v", ended, w.due.Sub(late), s.HeartbeatInterval)
		}
		if o, ended := w.expired(context.Background(), timer, w.due); !ended || o.reason != ReasonHeartbeatTimeout {
			t.Fatalf("after the grace: ended %v, reason %s; want a heartbeat timeout", ended, o.reason)
		}
		if !c.Suspected("n1") {
			t.Error("n1 not suspected after its heartbeat timeout")
		}

		// A client starved again and again gets a heartbeat timeout of
		// grace in all.
		w, timer = watchFrom()
		graces := 0
		for {
			o, ended := w.expired(context.Background(), timer, w.due.Add(s.HeartbeatInterval))
			if ended {
				if o.reason != ReasonHeartbeatTimeout {
					t.Fatalf("reason %s, want heartbeat timeout", o.reason)
				}
				break
			}
			graces++
		}
		if want := int((s.HeartbeatTimeout + s.HeartbeatInterval - 1) / s.HeartbeatInterval); w.graced != s.HeartbeatTimeout || graces != want {
			t.Errorf("%d graces, %v in all; want %d, %v", graces, w.graced, want, s.HeartbeatTimeout)
		}

		// Late by more than a heartbeat timeout (a long stop of the
		// client): a heartbeat timeout of grace, not none.
		w, timer = watchFrom()
		late = w.due.Add(3 * s.HeartbeatTimeout)
		if _, ended := w.expired(context.Background(), timer, late); ended || w.due.Sub(late) != s.HeartbeatTimeout {
			t.Errorf("3 heartbeat timeouts late: ended %v, grace %v; want %v", ended, w.due.Sub(late), s.HeartbeatTimeout)
		}
	})
}

// heartbeatWatch returns a lone client, its settings and a function
// that sends an attempt of it to n1 over conn (nil: none) by hand, its
// heartbeat deadline a heartbeat timeout from now, and a timer for
// expired to re-arm.
func heartbeatWatch(t *testing.T, conn transport.Conn) (Settings, *Client, func() (*sent, *time.Timer)) {
	s := DefaultSettings()
	s.Groups = []string{"a", "b"}
	c := loneClient(t, s)
	m := &MethodDesc{Service: "svc", Name: "M"}
	start := time.Now()
	op := &operation{c: c, m: m, s: s, start: start, deadline: start.Add(s.OperationTimeout)}
	return s, c, func() (*sent, *time.Timer) {
		now := time.Now()
		w := &sent{start: now, out: outcome{member: Member{Name: "n1", Group: "a"}}, a: frame.Attempt{
			Call: 1, Timeout: s.AttemptTimeout, Flags: frame.FlagScatter, // no cancel to send
		}, op: op, attemptEnd: now.Add(s.AttemptTimeout), due: now.Add(s.HeartbeatTimeout)}
		w.l.conn = conn
		w.l.beat.Store(now.UnixNano())
		w.l.heartbeatTimeout = s.HeartbeatTimeout
		return w, time.NewTimer(time.Hour)
	}
}

// unreadConn is a connection whose socket holds unread bytes: what the
// node sent while the client's reader waited for a core.
type unreadConn struct {
	transport.Conn
	unread atomic.Int64
}

func (c *unreadConn) Unread() int { return int(c.unread.Load()) }

// A heartbeat timeout whose timer fired on time while the node's
// heartbeat waits unread in the socket (the client's reader waits for a
// core behind a thousand callers) is not the node's silence: the client
// waits for its reader, a quarter of a heartbeat timeout at a time, a
// heartbeat timeout in all, and a frame read meanwhile clears it. With
// nothing unread, as from a node that stopped, it is believed at once.
func TestHeartbeatTimeoutWaitsForUnreadFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := &unreadConn{}
		s, _, watchFrom := heartbeatWatch(t, conn)
		quarter := s.HeartbeatTimeout / 4

		// Bytes unread, and the reader hands over a heartbeat during the
		// grace: no timeout.
		conn.unread.Store(64)
		w, timer := watchFrom()
		due := w.due
		if _, ended := w.expired(context.Background(), timer, due); ended || w.due != due.Add(quarter) {
			t.Fatalf("unread bytes: ended %v, grace %v; want %v", ended, w.due.Sub(due), quarter)
		}
		w.l.beat.Store(due.Add(time.Millisecond).UnixNano())
		if _, ended := w.expired(context.Background(), timer, w.due); ended {
			t.Fatal("the reader handed a heartbeat over during the grace, yet the attempt ended")
		}

		// Bytes stay unread: a heartbeat timeout of grace in all, then
		// the node is blamed.
		w, timer = watchFrom()
		graces := 0
		for {
			o, ended := w.expired(context.Background(), timer, w.due)
			if ended {
				if o.reason != ReasonHeartbeatTimeout {
					t.Fatalf("reason %s, want heartbeat timeout", o.reason)
				}
				break
			}
			graces++
		}
		if graces != 4 || w.graced != s.HeartbeatTimeout {
			t.Errorf("%d graces, %v in all; want 4, %v", graces, w.graced, s.HeartbeatTimeout)
		}

		// Nothing unread: the node is silent, blamed at once.
		conn.unread.Store(0)
		w, timer = watchFrom()
		if o, ended := w.expired(context.Background(), timer, w.due); !ended || o.reason != ReasonHeartbeatTimeout {
			t.Fatalf("nothing unread: ended %v, reason %s; want a heartbeat timeout at once", ended, o.reason)
		}

		// A connection that cannot tell (-1) changes nothing either.
		conn.unread.Store(-1)
		w, timer = watchFrom()
		if o, ended := w.expired(context.Background(), timer, w.due); !ended || o.reason != ReasonHeartbeatTimeout {
			t.Fatalf("cannot tell: ended %v, reason %s; want a heartbeat timeout at once", ended, o.reason)
		}
	})
}

// loneClient is a client with no members, for tests that drive one of its
// attempts by hand; it is closed when the test ends.
func loneClient(t *testing.T, s Settings) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{
		Transport:  memnet.NewNetwork().Transport(transport.Config{Node: "client"}),
		Membership: NewStaticMembership(),
		Settings:   s,
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
