package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
)

// pipeStream runs the Hello exchange over net.Pipe and returns the node's
// stream and the peer's raw end, which has read the node's Hello. idle is
// the stream's idle timeout; the stream ends the test's way on cleanup.
func pipeStream(t *testing.T, cfg Config, h ConnHandler, g *guard, idle time.Duration) (*stream, net.Conn) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	cfg = cfg.WithDefaults()
	node, raw := net.Pipe()
	hello, err := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "peer", Group: "g"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	go raw.Write(hello)
	got := make(chan error, 1)
	go func() {
		_, err := readHello(newFrameReader(raw, DefaultMaxFrameSize, nil))
		got <- err
	}()
	peer, fr, err := handshake(node, cfg, time.Second, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	s := newStream(node, fr, peer, cfg, h, g, idle, nil)
	t.Cleanup(func() {
		raw.Close()
		s.Close()
	})
	return s, raw
}

// A peer that starts a frame and stops is cut off when the frame timeout
// passes, and the buffer its frame held is given back.
func TestStreamFrameTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGuard(0, 0, discard)
		rec := newRecorder()
		_, raw := pipeStream(t, Config{FrameTimeout: 5 * time.Second}, rec, g, -1)
		start := time.Now()
		part := binary.BigEndian.AppendUint32(nil, 1<<20)
		part = append(part, frame.Version, byte(frame.TypeResult))
		part = append(part, make([]byte, 100<<10)...)
		go raw.Write(part)
		cl := rec.nextClose(t)
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("stalled frame closed after %v, want the frame timeout, 5s", took)
		}
		if !errors.Is(cl.err, ErrFrameTimeout) || !strings.Contains(cl.err.Error(), "of 1048580 bytes") {
			t.Errorf("close reason %v, want ErrFrameTimeout saying how much of the frame came", cl.err)
		}
		synctest.Wait()
		if st := g.stats(); st.FrameTimeouts != 1 || st.BufferedBytes != 0 {
			t.Errorf("node stats %+v, want one frame timeout and nothing buffered", st)
		}
	})
}

// Frames either way keep a connection open; a connection with nothing to
// carry for the idle timeout is closed, and a later Send says why.
func TestStreamIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Minute
		g := newGuard(0, 0, discard)
		rec := newRecorder()
		s, raw := pipeStream(t, Config{}, rec, g, idle)
		go io.Copy(io.Discard, raw)
		cancel, err := frame.Append(nil, &frame.Cancel{Call: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// 40 s apart: received, sent, received. None is idle for a minute.
		time.Sleep(40 * time.Second)
		raw.Write(cancel)
		rec.next(t)
		time.Sleep(40 * time.Second)
		if err := s.Send(&frame.Cancel{Call: 2}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Second)
		raw.Write(cancel)
		rec.next(t)
		awaitIdleClose(t, s, rec, idle)
		if n := g.stats().IdleClosed; n != 1 {
			t.Errorf("IdleClosed = %d, want 1", n)
		}
	})
}

// Frames that come close together keep the idle deadline where it is,
// measured from an earlier receive, without reading the clock
// (frameReader.setDeadline); it fires early, and the connection is
// still closed exactly the idle timeout after the last frame.
func TestStreamIdleTimeoutAfterBusyRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Minute
		rec := newRecorder()
		s, raw := pipeStream(t, Config{}, rec, newGuard(0, 0, discard), idle)
		go io.Copy(io.Discard, raw)
		cancel, err := frame.Append(nil, &frame.Cancel{Call: 1}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			time.Sleep(time.Second)
			raw.Write(cancel)
			rec.next(t)
		}
		awaitIdleClose(t, s, rec, idle)
	})
}

// awaitIdleClose checks that s, whose last frame came just now, is closed
// as idle exactly idle later, and that a Send after that says why.
func awaitIdleClose(t *testing.T, s *stream, rec *recorder, idle time.Duration) {
	t.Helper()
	last := time.Now()
	var cl closed
	select {
	case cl = <-rec.closes:
	case <-time.After(2 * idle):
		t.Fatal("the idle connection was not closed")
	}
	if !errors.Is(cl.err, ErrIdle) {
		t.Fatalf("close reason %v, want ErrIdle", cl.err)
	}
	if quiet := time.Since(last); quiet != idle {
		t.Errorf("closed %v after the last frame, want the idle timeout %v", quiet, idle)
	}
	if err := s.Send(&frame.Cancel{Call: 3}); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrIdle) {
		t.Errorf("Send after the idle close: %v, want ErrClosed wrapping ErrIdle", err)
	}
}

// A peer that stops reading cannot hold the connection's queue forever: a
// write that makes no progress for the frame timeout ends it.
func TestStreamWriteStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		s, _ := pipeStream(t, Config{FrameTimeout: 5 * time.Second}, rec, nil, -1)
		start := time.Now()
		if err := s.Send(&frame.Cancel{Call: 1}); err != nil {
			t.Fatal(err)
		}
		cl := rec.nextClose(t)
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("a stalled write ended the connection after %v, want 5s", took)
		}
		if !errors.Is(cl.err, ErrClosed) || !strings.Contains(cl.err.Error(), "the peer read 0 of") {
			t.Errorf("close reason %v, want ErrClosed saying the peer did not read", cl.err)
		}
	})
}

// Once a burst of connections has gone, memory goes back to the operating
// system: after a short delay, and not more often than every releaseEvery.
func TestGuardReturnsMemoryAfterBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var released atomic.Int32
		g := newGuard(0, 0, discard)
		g.freeMemory = func() { released.Add(1) }
		burst := func() {
			for range 1000 {
				g.admit()
			}
			for range 1000 {
				g.leave()
			}
		}
		burst()
		time.Sleep(releaseDelay - time.Millisecond)
		if n := released.Load(); n != 0 {
			t.Fatalf("released %d times before the delay", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := released.Load(); n != 1 {
			t.Fatalf("released %d times after the burst, want 1", n)
		}
		first := time.Now()
		burst()
		time.Sleep(releaseEvery - time.Since(first) - time.Millisecond)
		if n := released.Load(); n != 1 {
			t.Fatalf("released again within %v", releaseEvery)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := released.Load(); n != 2 {
			t.Fatalf("released %d times after the second burst, want 2", n)
		}
		// A few connections coming and going are not worth a collection.
		for range 10 {
			g.admit()
			g.leave()
			g.refuse(refusedHandshake, "10.0.0.1:1", "", ErrOverloaded)
		}
		time.Sleep(time.Minute)
		if n := released.Load(); n != 2 {
			t.Fatalf("released %d times after small churn, want still 2", n)
		}
		// Many refused connections are, even if each closed at once; the
		// release waits until they stop.
		start := time.Now()
		for range 5 * releaseRefusals {
			time.Sleep(10 * time.Millisecond)
			g.admit()
			g.refuse(refusedBadFrame, "10.0.0.1:1", "", ErrMalformedFrame)
			g.leave()
		}
		attackEnd := time.Now()
		time.Sleep(releaseDelay - time.Millisecond)
		if n := released.Load(); n != 2 {
			t.Fatalf("released during the attack or within %v of its end (%v after its start)", releaseDelay, time.Since(start))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := released.Load(); n != 3 {
			t.Errorf("released %d times %v after the refusals ended, want 3", n, time.Since(attackEnd))
		}
	})
}

// Every refusal is counted, but logged at most once a second per kind,
// with the number left unlogged.
func TestGuardRefusalsLogAtABoundedRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testkit.LogBuffer
		g := newGuard(0, 0, log.Logger())
		for range 100 {
			g.refuse(refusedConnLimit, "10.0.0.1:1", "", ErrOverloaded)
		}
		time.Sleep(refusalLogEvery)
		g.refuse(refusedConnLimit, "10.0.0.1:1", "", ErrOverloaded)
		lines := strings.Count(log.String(), "connection limit reached")
		if lines != 2 || !strings.Contains(log.String(), "unlogged_since_last=99") {
			t.Errorf("%d log lines, want 2, the second counting 99 unlogged:\n%s", lines, log.String())
		}
		if n := g.stats().RefusedConns; n != 101 {
			t.Errorf("RefusedConns = %d, want 101", n)
		}
	})
}

// Past MaxConns a connection is told so in a Hello (CapAtLimit) and
// closed; a slot that frees takes the next one.
func TestTCPMaxConns(t *testing.T) {
	// Handshakes that never finish must not time out under the test.
	tr := newTCP(t, "server", func(c *TCPConfig) { c.MaxConns, c.HandshakeTimeout = 2, time.Minute })
	l := listen(t, tr, newRecorder())
	var raws []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		raws = append(raws, c)
	}
	testkit.Until(t, "two connections counted", func() bool { return tr.NodeStats().Conns == 2 })
	extra, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(waitLimit))
	// It is told why, in a Hello, and then closed.
	got, err := io.ReadAll(extra)
	if err != nil {
		t.Fatalf("read on the connection past the limit: %v, want a Hello and EOF", err)
	}
	f, err := frame.Decode(got[4:])
	if h, ok := f.(*frame.Hello); err != nil || !ok || h.Caps&frame.CapAtLimit == 0 {
		t.Errorf("the connection past the limit got %v (%v), want a Hello with CapAtLimit", f, err)
	}
	// A dialer of this package names it.
	if _, err := newTCP(t, "client", nil).Dial(t.Context(), l.Addr(), newRecorder()); !errors.Is(err, ErrAtLimit) || !errors.Is(err, ErrOverloaded) {
		t.Errorf("dial past the limit: %v, want ErrAtLimit", err)
	}
	if n := tr.NodeStats().RefusedConns; n != 2 {
		t.Errorf("RefusedConns = %d, want 2", n)
	}
	raws[0].Close()
	testkit.Until(t, "a slot to free", func() bool { return tr.NodeStats().Conns == 1 })
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
}

// A burst of dials at a node at MaxConns, more than it tells at once
// with a teller, is told so all the same: every dialer reports
// ErrAtLimit, a busy node, and none a connection closed unexplained,
// which its runtime would take for a node that is gone.
func TestTCPMaxConnsBurstIsToldSo(t *testing.T) {
	tr := newTCP(t, "server", func(c *TCPConfig) { c.MaxConns, c.HandshakeTimeout = 1, time.Minute })
	l := listen(t, tr, newRecorder())
	held, err := net.Dial("tcp", l.Addr()) // the one connection: it never says Hello
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	testkit.Until(t, "the connection counted", func() bool { return tr.NodeStats().Conns == 1 })
	const burst = 4 * maxAtLimitHellos
	// A loaded machine must not turn a slow dial into a failed one.
	client := newTCP(t, "client", func(c *TCPConfig) { c.DialTimeout, c.HandshakeTimeout = time.Minute, time.Minute })
	errs := make(chan error, burst)
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() {
			c, err := client.Dial(t.Context(), l.Addr(), newRecorder())
			if err == nil {
				c.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrAtLimit) {
			t.Errorf("dial in a burst past the limit: %v, want ErrAtLimit", err)
		}
	}
}

// A connection shed at the handshake limit is told so in a Hello
// (CapAtLimit), as one past MaxConns is: a dialer reports ErrAtLimit, a
// busy node, not a refused connection.
func TestTCPHandshakeLimitSaysSo(t *testing.T) {
	tr := newTCP(t, "server", func(c *TCPConfig) {
		c.MaxHandshakes, c.HandshakeWait, c.HandshakeTimeout = 1, time.Millisecond, time.Minute
	})
	l := listen(t, tr, newRecorder())
	held, err := net.Dial("tcp", l.Addr()) // holds the only slot: it never says Hello
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	testkit.Until(t, "the handshake to start", func() bool { return tr.NodeStats().Handshakes == 1 })
	if _, err := newTCP(t, "client", nil).Dial(t.Context(), l.Addr(), newRecorder()); !errors.Is(err, ErrAtLimit) {
		t.Errorf("dial past the handshake limit: %v, want ErrAtLimit", err)
	}
	// On a busy machine the accept loop may shed it for the accept rate
	// instead: the dialer is told the same. A connection the shedder
	// takes from the backlog is counted just after it is told, so the
	// count may come a moment after the dialer heard.
	testkit.Until(t, "the refusal counted at the handshake limit or the accept rate", func() bool {
		st := tr.NodeStats()
		return st.HandshakeLimit+st.AcceptRateLimit > 0
	})
}

// Hostile connections of every kind the node must survive, all at once
// against one listener, while an honest connection exchanges frames: the
// honest one sees every frame and stays open; every hostile one is closed
// with its cause counted.
func TestTCPHostileConnectionsLeaveOthersAlone(t *testing.T) {
	tr := newTCP(t, "server", func(c *TCPConfig) {
		c.FrameTimeout = 300 * time.Millisecond
		c.MaxBufferedBytes = 4 << 20
		// Each kind's own refusal is counted below, not the handshake
		// limit's, which a slow machine could reach with 100 at once.
		c.MaxHandshakes = -1
	})
	srv := newRecorder()
	srv.echo = true
	l := listen(t, tr, srv)
	cli := newRecorder()
	honest := dial(t, newTCP(t, "client", nil), l.Addr(), cli)

	hello, err := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "hostile", Group: "x"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	stalled := binary.BigEndian.AppendUint32(append([]byte(nil), hello...), 4<<20)
	stalled = append(stalled, frame.Version, byte(frame.TypeResult))
	stalled = append(stalled, make([]byte, 256<<10)...)
	kinds := map[string][]byte{
		"no hello":         nil,
		"stalled frame":    stalled,
		"garbage":          []byte("\x00\x00\x00\x09\x07garbage!!"),
		"length 0xFFFFFFF": append(append([]byte(nil), hello...), 0xff, 0xff, 0xff, 0xff),
		"truncated hello":  hello[:len(hello)-2],
	}
	const perKind = 20
	var hostile []net.Conn
	for _, b := range kinds {
		for range perKind {
			c, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go c.Write(b)
			hostile = append(hostile, c)
		}
	}
	for i := range uint64(200) {
		if err := honest.Send(&frame.Attempt{Call: i, Service: "s", Method: "m", Payload: make([]byte, 1000)}); err != nil {
			t.Fatalf("honest Send %d: %v", i, err)
		}
		if got := cli.next(t); got.f.(*frame.Attempt).Call != i {
			t.Fatalf("honest frame %d came back as %+v", i, got.f)
		}
	}
	for _, c := range hostile {
		c.SetReadDeadline(time.Now().Add(waitLimit))
		// The node may close with bytes unread, which resets.
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("a hostile connection was not closed by the node: %v", err)
		}
	}
	testkit.Until(t, "only the honest connection left", func() bool { return tr.NodeStats().Conns == 1 })
	st := tr.NodeStats()
	if st.FrameTimeouts+st.BufferLimit != perKind || st.BadFrames != perKind || st.HandshakeFailures != 3*perKind || st.BufferedBytes != 0 {
		t.Errorf("node stats %+v: want the stalled frames timed out or over the buffer limit, the bad frames and failed hellos counted, nothing buffered", st)
	}
	if err := honest.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatalf("honest connection after the attack: %v", err)
	}
	cli.next(t)
	select {
	case c := <-cli.closes:
		t.Fatalf("the honest connection closed: %v", c.err)
	default:
	}
}

// Listening beyond loopback without TLS is refused unless asked for, and
// the error says how to do either.
func TestTCPPlaintextListenBeyondLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		_, err := newTCP(t, "n", nil).Listen(addr, newRecorder())
		if !errors.Is(err, ErrInsecureListen) || !strings.Contains(err.Error(), "TCPConfig.TLS") || !strings.Contains(err.Error(), "AllowPlaintext") {
			t.Errorf("Listen(%q) without TLS: %v, want ErrInsecureListen naming TLS and AllowPlaintext", addr, err)
		}
	}
	l, err := newTCP(t, "n", func(c *TCPConfig) { c.AllowPlaintext = true }).Listen("0.0.0.0:0", newRecorder())
	if err != nil {
		t.Fatalf("Listen with AllowPlaintext: %v", err)
	}
	l.Close()
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		if loop, err := IsLoopback(addr); !loop || err != nil {
			t.Errorf("IsLoopback(%q) = %v, %v", addr, loop, err)
		}
	}
}

// One end with TLS and the other without: each side's error says so,
// instead of "connection refused" or "EOF".
func TestTLSMismatchIsNamed(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	var log testkit.LogBuffer
	tlsNode := newTCP(t, "tls", func(c *TCPConfig) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server")}}
		c.Logger = log.Logger()
	})
	tl := listen(t, tlsNode, newRecorder())
	_, err := newTCP(t, "plain", nil).Dial(context.Background(), tl.Addr(), newRecorder())
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "the peer speaks TLS and this side does not") {
		t.Errorf("plaintext client to a TLS node: %v, want ErrTLS saying the peer speaks TLS", err)
	}
	log.WaitFor(t, "the client does not speak TLS")
	if n := tlsNode.NodeStats().TLSFailures; n != 1 {
		t.Errorf("TLSFailures = %d, want 1", n)
	}

	pl := listen(t, newTCP(t, "plain-server", nil), newRecorder())
	_, err = newTCP(t, "tls-client", func(c *TCPConfig) {
		c.ClientTLS = &tls.Config{RootCAs: ca.Pool}
	}).Dial(context.Background(), pl.Addr(), newRecorder())
	// The node closes as soon as it sees the TLS client's hello, before
	// or after its own Hello went out.
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "not speak TLS") {
		t.Errorf("TLS client to a plaintext node: %v, want ErrTLS saying the peer does not speak TLS", err)
	}
}
