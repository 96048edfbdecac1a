package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// waitLimit bounds every wait in socket tests: generous, since it only
// turns a hang into a failure.
const waitLimit = 10 * time.Second

// received is one frame a recorder saw, copied out of the read buffer.
type received struct {
	c Conn
	f frame.Frame
}

type closed struct {
	c   Conn
	err error
}

// recorder is a ConnHandler that copies every frame to a channel.
type recorder struct {
	frames chan received
	closes chan closed
	echo   bool // send every frame back
}

func newRecorder() *recorder {
	return &recorder{frames: make(chan received, 1<<16), closes: make(chan closed, 64)}
}

func (r *recorder) HandleFrame(c Conn, f frame.Frame) {
	if r.echo {
		if err := c.Send(f); err != nil {
			panic(err)
		}
	}
	r.frames <- received{c, cloneFrame(f)}
}

func (r *recorder) HandleClose(c Conn, err error) { r.closes <- closed{c, err} }

func (r *recorder) next(t testing.TB) received {
	t.Helper()
	select {
	case g := <-r.frames:
		return g
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a frame")
		return received{}
	}
}

func (r *recorder) nextClose(t testing.TB) closed {
	t.Helper()
	select {
	case g := <-r.closes:
		return g
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a connection to close")
		return closed{}
	}
}

// cloneFrame copies f out of the buffers it aliases.
func cloneFrame(f frame.Frame) frame.Frame {
	b, err := frame.Append(nil, f, 1<<30)
	if err != nil {
		panic(err)
	}
	g, err := frame.Decode(b[4:])
	if err != nil {
		panic(err)
	}
	return g
}

var discard = slog.New(slog.DiscardHandler)

func newTCP(t testing.TB, node string, edit func(*TCPConfig)) *TCP {
	t.Helper()
	cfg := TCPConfig{Config: Config{Node: node, Group: "g-" + node, Logger: discard}}
	if edit != nil {
		edit(&cfg)
	}
	tr, err := NewTCP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func listen(t testing.TB, tr Transport, h ConnHandler) Listener {
	t.Helper()
	l, err := tr.Listen("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t testing.TB, tr Transport, addr string, h ConnHandler) Conn {
	t.Helper()
	c, err := tr.Dial(context.Background(), addr, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTCPRoundTrip(t *testing.T) {
	srv := newRecorder()
	l := listen(t, newTCP(t, "server", nil), srv)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", nil), l.Addr(), cli)

	if got, want := c.Peer(), (frame.Hello{Version: frame.Version, Node: "server", Group: "g-server", MaxFrame: DefaultMaxFrameSize, Revision: frame.Revision, Caps: frame.Caps}); got != want {
		t.Errorf("client sees peer %+v, want %+v", got, want)
	}
	for name, f := range frametest.Samples() {
		if f.Type() == frame.TypeHello {
			continue
		}
		if err := c.Send(f); err != nil {
			t.Fatalf("Send(%s): %v", name, err)
		}
		got := srv.next(t)
		if diff := cmp.Diff(f, got.f, frametest.Opts); diff != "" {
			t.Errorf("%s mismatch (-sent +received):\n%s", name, diff)
		}
		if p := got.c.Peer(); p.Node != "client" || p.Group != "g-client" {
			t.Errorf("server sees peer %+v", p)
		}
		// And back the other way on the server's side of the connection.
		if err := got.c.Send(f); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(f, cli.next(t).f, frametest.Opts); diff != "" {
			t.Errorf("%s mismatch server to client:\n%s", name, diff)
		}
	}
	if !strings.Contains(l.Addr(), "127.0.0.1:") || strings.HasSuffix(l.Addr(), ":0") {
		t.Errorf("Addr() = %q, want a resolved port", l.Addr())
	}
}

func TestTCPConcurrentStreamsInOrder(t *testing.T) {
	const senders, perSender = 64, 200
	srv := newRecorder()
	l := listen(t, newTCP(t, "server", nil), srv)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())

	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Go(func() {
			payload := []byte(fmt.Sprintf("sender %d", g))
			for i := range perSender {
				if err := c.Send(&frame.Result{Call: uint64(g)<<32 | uint64(i), Payload: payload}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	next := make([]uint64, senders)
	for range senders * perSender {
		r := srv.next(t).f.(*frame.Result)
		g, i := r.Call>>32, r.Call&(1<<32-1)
		if i != next[g] {
			t.Fatalf("sender %d: got frame %d, want %d", g, i, next[g])
		}
		if want := fmt.Sprintf("sender %d", g); string(r.Payload) != want {
			t.Fatalf("payload %q, want %q", r.Payload, want)
		}
		next[g]++
	}
	st := c.(conncap.StatsConn).Stats()
	if st.FramesSent != senders*perSender || st.Writes == 0 || st.Writes > st.FramesSent {
		t.Errorf("stats %+v", st)
	}
	t.Logf("%d frames in %d writes", st.FramesSent, st.Writes)
}

// Frames queued while the writer is blocked leave together in one write.
func TestStreamCoalescesWrites(t *testing.T) {
	a, b := net.Pipe()
	cfg := Config{Logger: discard}.WithDefaults()
	s := newStream(a, newFrameReader(a, cfg.MaxFrameSize, nil), frame.Hello{Node: "peer"}, cfg, newRecorder(), nil, 0, nil)
	defer s.Close()
	const n = 100
	for i := range n {
		if err := s.Send(&frame.Cancel{Call: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing reads b yet, so the writer is stuck on its first write (of
	// one or more frames) and the rest wait in one buffer.
	fr := newFrameReader(b, DefaultMaxFrameSize, nil)
	for i := range n {
		p, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		f, err := frame.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.(*frame.Cancel).Call; got != uint64(i) {
			t.Fatalf("frame %d has call %d", i, got)
		}
	}
	if st := s.Stats(); st.Writes > 2 || st.FramesSent != n {
		t.Errorf("%d frames took %d writes, want at most 2", st.FramesSent, st.Writes)
	}
}

// blocker is a ConnHandler that blocks on its first frame until released.
type blocker struct {
	got     chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blocker) HandleFrame(Conn, frame.Frame) {
	b.once.Do(func() { close(b.got) })
	<-b.release
}

func (b *blocker) HandleClose(Conn, error) {}

func TestTCPStuckPeerDoesNotBlockOthers(t *testing.T) {
	stuck := &blocker{got: make(chan struct{}), release: make(chan struct{})}
	defer close(stuck.release)
	stuckL := listen(t, newTCP(t, "stuck", nil), stuck)
	fine := newRecorder()
	fine.echo = true
	fineL := listen(t, newTCP(t, "fine", nil), fine)

	tr := newTCP(t, "client", func(c *TCPConfig) { c.SendQueueBytes = 64 << 10 })
	cli := newRecorder()
	toStuck := dial(t, tr, stuckL.Addr(), cli)
	toFine := dial(t, tr, fineL.Addr(), cli)

	big := &frame.Result{Payload: make([]byte, 16<<10)}
	var err error
	// Kernel buffers take a few MiB before the queue can fill.
	for i := 0; i < 20000 && err == nil; i++ {
		err = toStuck.Send(big)
		if i == 0 {
			<-stuck.got
		}
	}
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("sending to a peer that does not read: %v, want ErrQueueFull", err)
	}
	if !strings.Contains(err.Error(), `"stuck"`) {
		t.Errorf("error %q does not name the peer", err)
	}
	if st := toStuck.(conncap.StatsConn).Stats(); st.QueueFull == 0 {
		t.Errorf("stats %+v count no dropped frame", st)
	}
	for i := range 10 {
		if err := toFine.Send(&frame.Cancel{Call: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		if got := cli.next(t).f.(*frame.Cancel).Call; got != uint64(i) {
			t.Fatalf("echo %d, want %d", got, i)
		}
	}
}

// rawHello connects to addr without the transport and does the Hello
// exchange by hand, so a test can then write anything.
func rawHello(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	b, _ := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "raw"}, 0)
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(waitLimit))
	p, err := newFrameReader(nc, 0, nil).next()
	if err != nil {
		t.Fatal(err)
	}
	if f, err := frame.Decode(p); err != nil || f.Type() != frame.TypeHello {
		t.Fatalf("server's first frame: %v, %v", f, err)
	}
	return nc
}

func TestTCPMalformedFrameClosesOnlyThatConn(t *testing.T) {
	var log testkit.LogBuffer
	srv := newRecorder()
	srv.echo = true
	l := listen(t, newTCP(t, "server", func(c *TCPConfig) { c.Logger = log.Logger() }), srv)
	cli := newRecorder()
	good := dial(t, newTCP(t, "client", nil), l.Addr(), cli)

	wire := func(body ...byte) []byte {
		return append([]byte{0, 0, 0, byte(len(body))}, body...)
	}
	tests := []struct {
		name string
		raw  []byte
		want error
	}{
		{"bad version", wire(9, byte(frame.TypeCancel), 1), ErrBadVersion},
		{"unknown type", wire(frame.Version, 77), ErrUnknownType},
		{"malformed body", wire(frame.Version, byte(frame.TypeResult), 1, 9), ErrMalformedFrame},
		{"short length", wire(frame.Version), ErrMalformedFrame},
		{"second hello", wire(frame.Version, byte(frame.TypeHello), 1, 0, 0), ErrMalformedFrame},
		{"2 GiB length prefix", []byte{0x80, 0, 0, 0}, ErrFrameTooLarge},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := rawHello(t, l.Addr())
			if _, err := nc.Write(tt.raw); err != nil {
				t.Fatal(err)
			}
			cl := srv.nextClose(t)
			if !errors.Is(cl.err, tt.want) {
				t.Fatalf("server closed with %v, want %v", cl.err, tt.want)
			}
			if cl.c.Peer().Node != "raw" {
				t.Errorf("closed connection is from %q", cl.c.Peer().Node)
			}
			// The server hung up on the raw connection...
			if _, err := io.ReadAll(nc); err != nil {
				t.Errorf("reading after the bad frame: %v, want EOF", err)
			}
			if err := cl.c.Send(&frame.Cancel{}); !errors.Is(err, ErrClosed) {
				t.Errorf("Send on the closed conn: %v, want ErrClosed", err)
			}
			// ...and the other connection carries on.
			if err := good.Send(&frame.Cancel{Call: uint64(i)}); err != nil {
				t.Fatal(err)
			}
			if got := cli.next(t).f.(*frame.Cancel).Call; got != uint64(i) {
				t.Errorf("echo %d, want %d", got, i)
			}
			srv.next(t)
		})
	}
	log.WaitFor(t, "bad frame")
	if !strings.Contains(log.String(), "peer=raw") {
		t.Errorf("log does not name the peer:\n%s", log.String())
	}
}

func TestTCPClose(t *testing.T) {
	srv := newRecorder()
	l := listen(t, newTCP(t, "server", nil), srv)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", nil), l.Addr(), cli)

	const n = 500
	for i := range n {
		if err := c.Send(&frame.Cancel{Call: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Queued frames were flushed before the close.
	for i := range n {
		if got := srv.next(t).f.(*frame.Cancel).Call; got != uint64(i) {
			t.Fatalf("frame %d has call %d", i, got)
		}
	}
	if cl := cli.nextClose(t); cl.err != nil || cl.c != c {
		t.Errorf("local HandleClose(%v, %v), want the conn and nil", cl.c, cl.err)
	}
	if cl := srv.nextClose(t); !errors.Is(cl.err, ErrClosed) {
		t.Errorf("remote HandleClose error %v, want ErrClosed", cl.err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := c.Send(&frame.Cancel{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	select {
	case cl := <-cli.closes:
		t.Errorf("HandleClose called twice (second: %v)", cl.err)
	case <-time.After(20 * time.Millisecond):
	}
}

func TestTCPSendTooLarge(t *testing.T) {
	l := listen(t, newTCP(t, "server", nil), newRecorder())
	c := dial(t, newTCP(t, "client", func(c *TCPConfig) { c.MaxFrameSize = 1 << 10 }), l.Addr(), newRecorder())
	if err := c.Send(&frame.Result{Payload: make([]byte, 2<<10)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("Send of an oversized frame: %v, want ErrFrameTooLarge", err)
	}
	if err := c.Send(&frame.Cancel{}); err != nil {
		t.Errorf("Send after a rejected frame: %v", err)
	}
}

// silentListener accepts TCP connections and never says Hello; it closes
// them when the test ends.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			nc, err := nl.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
		}
	}()
	t.Cleanup(func() {
		nl.Close()
		<-done
	})
	return nl
}

func TestTCPHandshakeTimeout(t *testing.T) {
	// A server that accepts but never says Hello.
	nl := silentListener(t)
	tr := newTCP(t, "client", func(c *TCPConfig) { c.HandshakeTimeout = 50 * time.Millisecond })
	_, err := tr.Dial(context.Background(), nl.Addr().String(), newRecorder())
	if !errors.Is(err, ErrRefused) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Dial to a silent server: %v, want ErrRefused and a deadline error", err)
	}

	// And a client that never says Hello is dropped by the server.
	var log testkit.LogBuffer
	srv := newTCP(t, "server", func(c *TCPConfig) {
		c.HandshakeTimeout = 50 * time.Millisecond
		c.Logger = log.Logger()
	})
	l := listen(t, srv, newRecorder())
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(waitLimit))
	if _, err := io.ReadAll(nc); err != nil {
		t.Errorf("silent client: %v, want the server to hang up", err)
	}
	log.WaitFor(t, "hello exchange failed")
}

func TestTCPDialRefused(t *testing.T) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := nl.Addr().String()
	nl.Close()
	_, err = newTCP(t, "client", nil).Dial(context.Background(), addr, newRecorder())
	if !errors.Is(err, ErrRefused) {
		t.Errorf("Dial to a closed port: %v, want ErrRefused", err)
	}
}

func TestTCPPeerResetIsErrReset(t *testing.T) {
	srv := newRecorder()
	l := listen(t, newTCP(t, "server", nil), srv)
	nc := rawHello(t, l.Addr())
	nc.(*net.TCPConn).SetLinger(0) // close with a RST
	nc.Close()
	if cl := srv.nextClose(t); !errors.Is(cl.err, ErrReset) || !errors.Is(cl.err, ErrClosed) {
		t.Errorf("server closed with %v, want ErrReset", cl.err)
	}
}

func TestTCPDialContextEndsHello(t *testing.T) {
	nl := silentListener(t)
	// The handshake timeout is long; the caller's context is not.
	tr := newTCP(t, "client", func(c *TCPConfig) { c.HandshakeTimeout = time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tr.Dial(ctx, nl.Addr().String(), newRecorder())
	if !errors.Is(err, ErrRefused) {
		t.Errorf("Dial: %v, want ErrRefused", err)
	}
	if d := time.Since(start); d > waitLimit {
		t.Errorf("Dial took %v after its context ended", d)
	}
}
