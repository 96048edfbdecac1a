package transport

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
)

// ratedTCP is a transport that takes 10 new connections a second after a
// burst of 2, with handshake slots to spare and handshakes that do not
// time out under the tests.
func ratedTCP(t *testing.T, log *testkit.LogBuffer) *TCP {
	return newTCP(t, "node", func(c *TCPConfig) {
		c.AcceptRate, c.AcceptBurst = 10, 2
		c.MaxHandshakes, c.HandshakeTimeout = 100, time.Hour
		if log != nil {
			c.Logger = log.Logger()
		}
	})
}

// Beyond the burst the node takes one connection per 1/AcceptRate, the
// others waiting in the backlog, and none is refused while they wait less
// than rateShedAfter.
func TestAcceptRateWaitsBeyondTheBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := ratedTCP(t, nil)
		l := listenPipe(t, tr, newRecorder())
		start := time.Now()
		var conns []net.Conn
		for i := range 6 {
			conns = append(conns, l.dial(t))
			want := time.Duration(max(0, i-1)) * 100 * time.Millisecond
			if at := time.Since(start); at != want {
				t.Errorf("connection %d accepted after %v, want %v", i+1, at, want)
			}
		}
		for i, c := range conns {
			if err := greet(c); err != nil {
				t.Fatalf("hello exchange of connection %d: %v", i+1, err)
			}
		}
		// A quiet moment fills the bucket again: a burst gets in at once.
		time.Sleep(time.Second)
		start = time.Now()
		l.dial(t)
		l.dial(t)
		if waited := time.Since(start); waited != 0 {
			t.Errorf("after a quiet second, a burst of 2 waited %v, want none", waited)
		}
		synctest.Wait()
		st := tr.NodeStats()
		// Paced: connections 3 to 6, and the wait for the token after.
		if st.Paced != 5 || st.AcceptRateLimit != 0 || st.Conns != 8 {
			t.Errorf("node stats %+v, want 5 paced accepts, no refusal, 8 connections", st)
		}
	})
}

// When connections keep coming faster than the rate for rateShedAfter,
// the node sheds: it closes each new one that finds no token before
// reading from it or writing to it. Once a connection finds a token to
// spare, it takes them again without shedding. Both are logged at most
// once a second.
func TestAcceptRateShedsWhenBehindTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testkit.LogBuffer
		tr := ratedTCP(t, &log)
		l := listenPipe(t, tr, newRecorder())
		start := time.Now()
		for range 12 {
			l.dial(t) // 2 at once, then one per 100 ms
		}
		if at := time.Since(start); at != rateShedAfter {
			t.Fatalf("12th connection accepted after %v, want %v", at, rateShedAfter)
		}
		var shed []net.Conn
		for range 3 {
			shed = append(shed, l.dial(t))
		}
		if at := time.Since(start); at != rateShedAfter {
			t.Errorf("connections past rateShedAfter were accepted after %v, want at once, %v", at, rateShedAfter)
		}
		for _, c := range shed {
			if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("read on a shed connection: %d bytes, %v; want EOF before any byte", n, err)
			}
			if _, err := c.Write([]byte{0}); !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("write to a shed connection: %v, want it closed unread", err)
			}
		}
		st := tr.NodeStats()
		if st.AcceptRateLimit != 3 || st.Paced != 10 || st.Conns != 12 {
			t.Errorf("node stats %+v, want 3 refused at the accept rate, 10 paced accepts, 12 connections", st)
		}
		out := log.String()
		logsOnce(t, out,
			"transport: pacing new connections: accept rate reached",
			"transport: refused connection: accept rate exceeded",
			"faster than 10 a second for 1s (TCPConfig.AcceptRate)",
		)
		time.Sleep(time.Second)
		for i := range 3 {
			if err := greet(l.dial(t)); err != nil {
				t.Fatalf("hello exchange of connection %d after the flood: %v", i+1, err)
			}
		}
		synctest.Wait()
		if st := tr.NodeStats(); st.AcceptRateLimit != 3 || st.Conns != 15 {
			t.Errorf("node stats %+v, want no further refusal once connections slowed down", st)
		}
	})
}

// A negative AcceptRate takes connections as fast as they come.
func TestAcceptRateNegativeIsNoLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTCP(t, "node", func(c *TCPConfig) {
			c.AcceptRate, c.MaxHandshakes, c.HandshakeTimeout = -1, -1, time.Hour
		})
		l := listenPipe(t, tr, newRecorder())
		start := time.Now()
		for range 1000 {
			l.dial(t)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("1000 connections took %v to be accepted without a rate, want no wait", waited)
		}
		synctest.Wait()
		if st := tr.NodeStats(); st.Paced != 0 || st.Conns != 1000 {
			t.Errorf("node stats %+v, want nothing paced", st)
		}
	})
}

// The default rate takes an honest reconnect storm of a few hundred
// connections, more than AcceptBurst, over real sockets without refusing
// one: those beyond the burst wait in the backlog for the rate. The
// connections are made before any Hello, so that they arrive faster than
// the rate, as from a few hundred peers and clients at once.
func TestTCPReconnectBurstWithDefaultRate(t *testing.T) {
	const n = 300
	// Handshake slots are not what this test is about: a long
	// HandshakeWait keeps them from shedding on a busy machine.
	tr := newTCP(t, "server", func(c *TCPConfig) {
		c.HandshakeWait, c.HandshakeTimeout = waitLimit, waitLimit
	})
	l := listen(t, tr, newRecorder())
	start := time.Now()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.DialTimeout("tcp", l.Addr(), waitLimit)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			c.SetDeadline(time.Now().Add(waitLimit))
			if err := greet(c); err != nil {
				t.Errorf("hello exchange of connection %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	// A lower bound only: however busy the machine, the rate cannot let
	// the connections past the burst in faster than this.
	least := time.Duration(n-DefaultAcceptBurst) * time.Second / DefaultAcceptRate
	if took := time.Since(start); took < least {
		t.Errorf("%d connections got in within %v, faster than the default rate allows (%v)", n, took, least)
	}
	if st := tr.NodeStats(); st.AcceptRateLimit != 0 || st.HandshakeLimit != 0 || st.Paced == 0 || st.Conns != n {
		t.Errorf("node stats %+v, want all %d connections in, paced, none refused", st, n)
	}
}
