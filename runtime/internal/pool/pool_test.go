package pool

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

var errDial = errors.New("no route to peer")

// waitLimit bounds the waits over a real socket: generous, since it only
// turns a hang into a failure.
const waitLimit = 10 * time.Second

// recorder hands the frames and the closes of its connections to
// channels, and sends every frame back if echo is set.
type recorder struct {
	frames chan received
	closes chan closed
	echo   bool
}

type received struct {
	c transport.Conn
	f frame.Frame
}

type closed struct {
	c   transport.Conn
	err error
}

func newRecorder() *recorder {
	return &recorder{frames: make(chan received, 64), closes: make(chan closed, 64)}
}

func (r *recorder) HandleFrame(c transport.Conn, f frame.Frame) {
	if r.echo {
		c.Send(f)
	}
	r.frames <- received{c, f}
}

func (r *recorder) HandleClose(c transport.Conn, err error) { r.closes <- closed{c, err} }

// newTCP is a TCP transport of the node named node whose handshakes wait
// up to waitLimit.
func newTCP(t *testing.T, node string) *transport.TCP {
	t.Helper()
	tr, err := transport.NewTCP(transport.TCPConfig{
		Config:           transport.Config{Node: node, Group: "g-" + node, Logger: slog.New(slog.DiscardHandler)},
		HandshakeTimeout: waitLimit,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// fakeTransport dials fakeConns; a test decides when each dial ends and
// whether it fails.
type fakeTransport struct {
	dials   atomic.Int32
	release chan struct{} // when non-nil, each dial waits for a value
	fail    atomic.Bool
	unacked atomic.Int64 // the last dial's conncap.UnackedTimeout
}

func (f *fakeTransport) Dial(ctx context.Context, addr string, h transport.ConnHandler) (transport.Conn, error) {
	f.dials.Add(1)
	f.unacked.Store(int64(conncap.UnackedTimeout(ctx)))
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.fail.Load() {
		return nil, errDial
	}
	return &fakeConn{addr: addr, h: h}, nil
}

func (f *fakeTransport) Listen(string, transport.ConnHandler) (transport.Listener, error) {
	return nil, errors.New("fake transport does not listen")
}

type fakeConn struct {
	addr string
	h    transport.ConnHandler
	once sync.Once
}

func (c *fakeConn) Send(frame.Frame) error { return nil }
func (c *fakeConn) Peer() frame.Hello      { return frame.Hello{Node: c.addr} }
func (c *fakeConn) Close() error {
	c.once.Do(func() { c.h.HandleClose(c, nil) })
	return nil
}

var (
	_ transport.Transport = (*fakeTransport)(nil)
	_ transport.Conn      = (*fakeConn)(nil)
)

func TestPoolSharesOneDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{release: make(chan struct{})}
		p := New(ft, newRecorder(), transport.PoolConfig{})
		defer p.Close()

		const callers = 10
		conns := make(chan transport.Conn, callers)
		for range callers {
			go func() {
				c, err := p.Get(context.Background(), "a:1")
				if err != nil {
					t.Error(err)
				}
				conns <- c
			}()
		}
		synctest.Wait()
		if n := ft.dials.Load(); n != 1 {
			t.Fatalf("%d dials in progress for one address, want 1", n)
		}
		close(ft.release)
		first := <-conns
		for range callers - 1 {
			if c := <-conns; c != first {
				t.Fatalf("callers got different connections")
			}
		}
		if n := ft.dials.Load(); n != 1 {
			t.Errorf("%d dials, want 1", n)
		}
		if cs := p.Conns(); len(cs) != 1 || cs[0] != first {
			t.Errorf("Conns() = %v", cs)
		}
	})
}

func TestPoolGetContextEndsOnlyTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{release: make(chan struct{})}
		p := New(ft, newRecorder(), transport.PoolConfig{})
		defer p.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if _, err := p.Get(ctx, "a:1"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get with an expiring context: %v, want DeadlineExceeded", err)
		}
		// The shared dial carries on for the next caller.
		go func() { ft.release <- struct{}{} }()
		if _, err := p.Get(context.Background(), "a:1"); err != nil {
			t.Fatal(err)
		}
		if n := ft.dials.Load(); n != 1 {
			t.Errorf("%d dials, want 1", n)
		}
	})
}

// CloseUnackedAfter reaches every dial of the pool, and only that pool's.
func TestPoolCloseUnackedAfter(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want time.Duration
	}{
		{[]Option{CloseUnackedAfter(2 * time.Second)}, 2 * time.Second},
		{nil, 0},
	} {
		ft := &fakeTransport{}
		p := New(ft, newRecorder(), transport.PoolConfig{}, tc.opts...)
		if _, err := p.Get(context.Background(), "a:1"); err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(ft.unacked.Load()); got != tc.want {
			t.Errorf("the dial's unacknowledged timeout %v, want %v", got, tc.want)
		}
		p.Close()
	}
}

func TestPoolBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lo, hi = 100 * time.Millisecond, time.Second
		ft := &fakeTransport{}
		ft.fail.Store(true)
		p := New(ft, newRecorder(), transport.PoolConfig{BackoffMin: lo, BackoffMax: hi})
		defer p.Close()
		ctx := context.Background()

		window := lo
		for failure := 1; failure <= 6; failure++ {
			dials := ft.dials.Load()
			if _, err := p.Get(ctx, "a:1"); !errors.Is(err, errDial) {
				t.Fatalf("failure %d: Get = %v, want the dial error", failure, err)
			}
			if ft.dials.Load() != dials+1 {
				t.Fatalf("failure %d: Get did not dial", failure)
			}
			// Jitter keeps the wait within [window/2, window].
			time.Sleep(window/2 - time.Millisecond)
			start := time.Now()
			_, err := p.Get(ctx, "a:1")
			if !errors.Is(err, errDial) || ft.dials.Load() != dials+1 {
				t.Fatalf("failure %d: Get inside the backoff window = %v after %d dials; want the dial error and no dial", failure, err, ft.dials.Load())
			}
			if time.Since(start) != 0 {
				t.Errorf("Get inside the backoff window waited")
			}
			time.Sleep(window/2 + 2*time.Millisecond)
			window = min(2*window, hi)
		}

		// Success resets the backoff.
		ft.fail.Store(false)
		c, err := p.Get(ctx, "a:1")
		if err != nil {
			t.Fatalf("Get after the window: %v", err)
		}
		ft.fail.Store(true)
		c.Close()
		dials := ft.dials.Load()
		if _, err := p.Get(ctx, "a:1"); !errors.Is(err, errDial) {
			t.Fatal(err)
		}
		time.Sleep(lo + time.Millisecond)
		p.Get(ctx, "a:1")
		if n := ft.dials.Load(); n != dials+2 {
			t.Errorf("after a reset, a failure backed off for more than BackoffMin (%d dials, want %d)", n, dials+2)
		}
	})
}

// Redial dials inside the backoff window that makes Get fail at once, and
// a connection it makes is the one Get returns after.
func TestPoolRedialSkipsTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{}
		ft.fail.Store(true)
		p := New(ft, newRecorder(), transport.PoolConfig{BackoffMin: time.Second, BackoffMax: time.Second})
		defer p.Close()
		ctx := context.Background()
		if _, err := p.Get(ctx, "a:1"); !errors.Is(err, errDial) {
			t.Fatalf("Get = %v, want the dial error", err)
		}
		dials := ft.dials.Load()
		if _, err := p.Redial(ctx, "a:1", 0); !errors.Is(err, errDial) || ft.dials.Load() != dials+1 {
			t.Fatalf("Redial inside the backoff window = %v after %d dials; want a dial, and its error", err, ft.dials.Load()-dials)
		}
		ft.fail.Store(false)
		if _, err := p.Get(ctx, "a:1"); !errors.Is(err, errDial) || ft.dials.Load() != dials+1 {
			t.Fatalf("Get inside the backoff window = %v after %d dials; want the dial error and no dial", err, ft.dials.Load()-dials)
		}
		c, err := p.Redial(ctx, "a:1", 0)
		if err != nil || ft.dials.Load() != dials+2 {
			t.Fatalf("Redial = %v after %d dials; want a connection from one more dial", err, ft.dials.Load()-dials)
		}
		if got, err := p.Get(ctx, "a:1"); err != nil || got != c || ft.dials.Load() != dials+2 {
			t.Errorf("Get after the Redial = %v, %v; want its connection, without a dial", got, err)
		}
	})
}

// Redial joins a dial in flight while it is young, and gives up one that
// has not connected within stale for a dial of its own: after a partition
// heals, a dial whose SYN the partition lost connects only when TCP sends
// it again, a second later, and every retest that joined it failed at its
// own bound meanwhile. The waiters of the dial given up get the new
// dial's connection, and the old one's result is dropped.
func TestPoolRedialGivesUpAStaleDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{release: make(chan struct{})}
		p := New(ft, newRecorder(), transport.PoolConfig{})
		defer p.Close()
		const stale = 200 * time.Millisecond
		joined := make(chan transport.Conn, 1)
		go func() {
			c, _ := p.Get(context.Background(), "a:1") // starts the dial that hangs
			joined <- c
		}()
		synctest.Wait()
		time.Sleep(stale / 2)
		ctx, cancel := context.WithTimeout(context.Background(), stale/4)
		if _, err := p.Redial(ctx, "a:1", stale); err == nil || ft.dials.Load() != 1 {
			t.Fatalf("Redial with the dial in flight for %v (stale %v) = %v after %d dials; want it to join that dial and time out", stale/2, stale, err, ft.dials.Load())
		}
		cancel()
		time.Sleep(stale)
		type result struct {
			c   transport.Conn
			err error
		}
		got := make(chan result, 1)
		go func() {
			c, err := p.Redial(context.Background(), "a:1", stale)
			got <- result{c, err}
		}()
		synctest.Wait()
		if n := ft.dials.Load(); n != 2 {
			t.Fatalf("%d dials after a Redial found the dial in flight for %v; want a second dial", n, stale*7/4)
		}
		ft.release <- struct{}{} // the first dial was given up: this is the second's
		r := <-got
		if r.err != nil {
			t.Fatalf("Redial after the dial in flight went stale: %v", r.err)
		}
		c := r.c
		if first := <-joined; first != c {
			t.Errorf("the Get that waited on the dial given up got %v, want the new dial's connection %v", first, c)
		}
		if again, err := p.Get(context.Background(), "a:1"); err != nil || again != c {
			t.Errorf("Get after = %v, %v; want the new dial's connection", again, err)
		}
	})
}

func TestPoolRedialsAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{}
		h := newRecorder()
		p := New(ft, h, transport.PoolConfig{})
		defer p.Close()
		ctx := context.Background()

		first, err := p.Get(ctx, "a:1")
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := p.Get(ctx, "a:1"); again != first {
			t.Fatal("second Get did not reuse the live connection")
		}
		first.Close()
		if cl := <-h.closes; cl.c != first {
			t.Fatalf("handler saw the close of %v", cl.c)
		}
		if cs := p.Conns(); len(cs) != 0 {
			t.Errorf("Conns() after close = %v", cs)
		}
		second, err := p.Get(ctx, "a:1")
		if err != nil {
			t.Fatal(err)
		}
		if second == first || ft.dials.Load() != 2 {
			t.Errorf("no redial after close (%d dials)", ft.dials.Load())
		}
	})
}

// A connection discarded before it reports its close is not handed out
// again; its late close does not drop the new one.
func TestPoolDiscard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{}
		h := newRecorder()
		p := New(ft, h, transport.PoolConfig{})
		defer p.Close()
		ctx := context.Background()
		first, err := p.Get(ctx, "a:1")
		if err != nil {
			t.Fatal(err)
		}
		p.Discard("a:1", first)
		if c := p.Lookup("a:1"); c != nil {
			t.Fatalf("Lookup after Discard = %v, want none", c)
		}
		second, err := p.Get(ctx, "a:1")
		if err != nil || second == first || ft.dials.Load() != 2 {
			t.Fatalf("Get after Discard = %v, %v after %d dials; want a new connection", second, err, ft.dials.Load())
		}
		first.Close()
		<-h.closes
		if c := p.Lookup("a:1"); c != second {
			t.Errorf("the discarded connection's close dropped its successor: Lookup = %v", c)
		}
	})
}

func TestPoolForwardsFrames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newRecorder()
		p := New(&fakeTransport{}, h, transport.PoolConfig{})
		defer p.Close()
		c, err := p.Get(context.Background(), "a:1")
		if err != nil {
			t.Fatal(err)
		}
		fc := c.(*fakeConn)
		fc.h.HandleFrame(c, &frame.Cancel{Call: 5})
		if got := <-h.frames; got.c != c || got.f.(*frame.Cancel).Call != 5 {
			t.Errorf("handler got %v", got)
		}
	})
}

func TestPoolClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTransport{}
		h := newRecorder()
		p := New(ft, h, transport.PoolConfig{})
		c, err := p.Get(context.Background(), "a:1")
		if err != nil {
			t.Fatal(err)
		}
		// A dial in progress is abandoned.
		ft.release = make(chan struct{})
		errs := make(chan error, 1)
		go func() {
			_, err := p.Get(context.Background(), "b:2")
			errs <- err
		}()
		synctest.Wait()
		p.Close()
		if cl := <-h.closes; cl.c != c {
			t.Errorf("Close closed %v, want the pooled conn", cl.c)
		}
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("Get during Close: %v, want a cancelled dial", err)
		}
		if _, err := p.Get(context.Background(), "a:1"); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Get after Close: %v, want ErrClosed", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// A peer that accepted the connection and is slow to say its Hello is
// busy, not gone: a Get whose wait ends meanwhile says so (ErrHelloLate),
// the dial goes on, and a later Get gets its connection.
func TestPoolHelloLate(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if nc, err := nl.Accept(); err == nil {
			accepted <- nc
		}
	}()
	p := New(newTCP(t, "client"), newRecorder(), transport.PoolConfig{DialTimeout: waitLimit})
	defer p.Close()
	ctx, cancel := context.WithCancel(t.Context())
	connected := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		pp := p.peers[nl.Addr().String()]
		return pp != nil && pp.connected
	}
	go func() {
		nc := <-accepted
		testkit.Within(testkit.Bound, connected) // the dial connected: the Hello is what is late
		accepted <- nc
		cancel()
	}()
	if _, err := p.Get(ctx, nl.Addr().String()); !errors.Is(err, transport.ErrHelloLate) {
		t.Fatalf("Get that gave up while the peer's Hello was late: %v, want ErrHelloLate", err)
	}
	nc := <-accepted
	defer nc.Close()
	hello, err := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "slow", Group: "g", Revision: frame.Revision, Caps: frame.Caps}, transport.DefaultMaxFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(hello); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, nc)
	c, err := p.Get(t.Context(), nl.Addr().String())
	if err != nil {
		t.Fatalf("Get once the Hello came: %v", err)
	}
	if c.Peer().Node != "slow" {
		t.Errorf("connected to %q, want slow", c.Peer().Node)
	}
}

// A pooled TCP connection to a server that restarts is redialed.
func TestPoolReconnectsAfterRestart(t *testing.T) {
	srvT := newTCP(t, "server")
	srv := newRecorder()
	srv.echo = true
	l, err := srvT.Listen("127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr()

	cli := newRecorder()
	p := New(newTCP(t, "client"), cli, transport.PoolConfig{BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
	defer p.Close()
	roundTrip := func(call uint64) transport.Conn {
		t.Helper()
		c, err := p.Get(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(&frame.Cancel{Call: call}); err != nil {
			t.Fatal(err)
		}
		if got := testkit.Receive(t, cli.frames, "the echo").f.(*frame.Cancel).Call; got != call {
			t.Fatalf("echo %d, want %d", got, call)
		}
		return c
	}
	first := roundTrip(1)
	serverSide := testkit.Receive(t, srv.frames, "the server's frame").c

	// The server goes away: listener and connection.
	l.Close()
	serverSide.Close()
	if cl := testkit.Receive(t, cli.closes, "the close"); cl.c != first || !errors.Is(cl.err, transport.ErrClosed) {
		t.Fatalf("pool handler saw close of %v with %v", cl.c, cl.err)
	}
	if _, err := p.Get(context.Background(), addr); !errors.Is(err, transport.ErrRefused) {
		t.Fatalf("Get with the server down: %v, want transport.ErrRefused", err)
	}

	l2, err := srvT.Listen(addr, srv)
	if err != nil {
		t.Fatalf("restarting the listener on %s: %v", addr, err)
	}
	defer l2.Close()
	var second transport.Conn
	testkit.Until(t, "a reconnect", func() bool {
		second, err = p.Get(context.Background(), addr)
		return err == nil
	})
	if second == first {
		t.Fatal("pool returned the closed connection")
	}
	if c := roundTrip(2); c != second {
		t.Errorf("pool changed connection again")
	}
}
