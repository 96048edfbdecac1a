package memnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// memRec is a transport.ConnHandler that records what it gets.
type memRec struct {
	mu     sync.Mutex
	conn   transport.Conn
	frames []frame.Frame
	at     []time.Time
	closes []error
	onRecv func(c transport.Conn, f frame.Frame) // optional, called after recording
}

func (r *memRec) HandleFrame(c transport.Conn, f frame.Frame) {
	// Re-encode to copy: the frame's bytes are only valid during the call.
	buf, err := frame.Append(nil, f, 0)
	if err != nil {
		panic(err)
	}
	cp, err := frame.Decode(buf[4:])
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	r.conn = c
	r.frames = append(r.frames, cp)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	if r.onRecv != nil {
		r.onRecv(c, f)
	}
}

func (r *memRec) HandleClose(c transport.Conn, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conn = c
	r.closes = append(r.closes, err)
}

// calls returns the Call numbers of the frame.Cancel frames received.
func (r *memRec) calls() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, f := range r.frames {
		if c, ok := f.(*frame.Cancel); ok {
			out = append(out, c.Call)
		}
	}
	return out
}

func (r *memRec) closeErrs() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.closes...)
}

func (r *memRec) lastConn() transport.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

// memSetup is a client b1 (group b) dialed to a server a1 (group a).
type memSetup struct {
	net      *Network
	cli      transport.Conn
	cliRec   *memRec
	srvRec   *memRec
	srvTrans *Transport
	ln       transport.Listener
}

func newMemSetup(t *testing.T, srvCfg, cliCfg transport.Config) *memSetup {
	t.Helper()
	if srvCfg.Node == "" {
		srvCfg.Node, srvCfg.Group = "a1", "a"
	}
	if cliCfg.Node == "" {
		cliCfg.Node, cliCfg.Group = "b1", "b"
	}
	s := &memSetup{net: NewNetwork(), cliRec: new(memRec), srvRec: new(memRec)}
	t.Cleanup(func() { s.net.Close() })
	s.srvTrans = s.net.Transport(srvCfg)
	ln, err := s.srvTrans.Listen(srvCfg.Node, s.srvRec)
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	s.cli, err = s.net.Transport(cliCfg).Dial(t.Context(), srvCfg.Node, s.cliRec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func memSendCancels(t *testing.T, c transport.Conn, from, to uint64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := c.Send(&frame.Cancel{Call: i}); err != nil {
			t.Fatalf("Send(%d): %v", i, err)
		}
	}
}

func memSeq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func memWantCalls(t *testing.T, who string, r *memRec, want []uint64) {
	t.Helper()
	if diff := cmp.Diff(want, r.calls()); diff != "" {
		t.Errorf("%s received (-want +got):\n%s", who, diff)
	}
}

func TestMemRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		s.srvRec.onRecv = func(c transport.Conn, f frame.Frame) {
			if a, ok := f.(*frame.Attempt); ok {
				if err := c.Send(&frame.Result{Call: a.Call, Payload: append([]byte("re:"), a.Payload...)}); err != nil {
					t.Errorf("reply: %v", err)
				}
			}
		}
		att := &frame.Attempt{Call: 7, OpID: [16]byte{1, 2}, Timeout: time.Second, Heartbeat: 90 * time.Millisecond,
			Service: "Accounts", Method: "Withdraw", Entities: []string{"acc-1"}, Flags: frame.FlagHold,
			History: []frame.Prior{{Node: "c1", Group: "c", Reason: 2}}, Payload: []byte("args")}
		if err := s.cli.Send(att); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()

		if diff := cmp.Diff([]frame.Frame{att}, s.srvRec.frames); diff != "" {
			t.Errorf("server received (-want +got):\n%s", diff)
		}
		want := []frame.Frame{&frame.Result{Call: 7, Payload: []byte("re:args")}}
		if diff := cmp.Diff(want, s.cliRec.frames); diff != "" {
			t.Errorf("client received (-want +got):\n%s", diff)
		}
		if got, want := s.cli.Peer(), (frame.Hello{Version: frame.Version, Node: "a1", Group: "a", MaxFrame: transport.DefaultMaxFrameSize, Revision: frame.Revision}); got != want {
			t.Errorf("client Peer() = %+v, want %+v", got, want)
		}
		srv := s.srvRec.lastConn()
		if got, want := srv.Peer(), (frame.Hello{Version: frame.Version, Node: "b1", Group: "b", MaxFrame: transport.DefaultMaxFrameSize, Revision: frame.Revision}); got != want {
			t.Errorf("server Peer() = %+v, want %+v", got, want)
		}
		cs, ss := s.cli.(conncap.StatsConn).Stats(), srv.(conncap.StatsConn).Stats()
		if cs.FramesSent != 1 || cs.FramesReceived != 1 || ss.FramesSent != 1 || ss.FramesReceived != 1 {
			t.Errorf("stats: client %+v, server %+v", cs, ss)
		}
		if cs.BytesSent != ss.BytesReceived || ss.BytesSent != cs.BytesReceived || cs.BytesSent == 0 {
			t.Errorf("byte counts disagree: client %+v, server %+v", cs, ss)
		}
	})
}

func TestMemPauseHoldsFramesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		memSendCancels(t, s.cli, 0, 1) // so the server has a conn to answer on
		synctest.Wait()
		srv := s.srvRec.lastConn()

		s.net.Pause("a1")
		memSendCancels(t, s.cli, 1, 100)
		memSendCancels(t, srv, 0, 50) // a paused node's own sends are held too
		time.Sleep(time.Hour)
		synctest.Wait()
		memWantCalls(t, "paused server", s.srvRec, memSeq(0, 1))
		memWantCalls(t, "client of paused server", s.cliRec, nil)

		s.net.Resume("a1")
		synctest.Wait()
		memWantCalls(t, "resumed server", s.srvRec, memSeq(0, 100))
		memWantCalls(t, "client", s.cliRec, memSeq(0, 50))
		if d := s.net.Dropped(); d != 0 {
			t.Errorf("Dropped() = %d, want 0", d)
		}
	})
}

func TestMemPauseHoldsClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		s.net.Pause("a1")
		if n := s.net.Reset("a1", "b1"); n != 1 {
			t.Fatalf("Reset broke %d connections, want 1", n)
		}
		synctest.Wait()
		if got := s.srvRec.closeErrs(); len(got) != 0 {
			t.Fatalf("paused server got HandleClose(%v)", got)
		}
		if got := s.cliRec.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrReset) {
			t.Fatalf("client closes = %v, want [transport.ErrReset]", got)
		}
		s.net.Resume("a1")
		synctest.Wait()
		if got := s.srvRec.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrReset) {
			t.Fatalf("resumed server closes = %v, want [transport.ErrReset]", got)
		}
	})
}

func TestMemPauseBlocksDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewNetwork()
		defer net.Close()
		if _, err := net.Transport(transport.Config{Node: "a1"}).Listen("", new(memRec)); err != nil {
			t.Fatal(err)
		}
		cli := net.Transport(transport.Config{Node: "b1"})
		net.Pause("a1")

		// A dial with a deadline gives up exactly then.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		start := time.Now()
		_, err := cli.Dial(ctx, "a1", new(memRec))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial to paused node: %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("Dial gave up after %v, want 1s", d)
		}

		// A dial without one waits for Resume.
		done := make(chan error, 1)
		go func() {
			c, err := cli.Dial(t.Context(), "a1", new(memRec))
			if err == nil && c.Peer().Node != "a1" {
				err = fmt.Errorf("peer %q", c.Peer().Node)
			}
			done <- err
		}()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Dial returned while the node is paused: %v", err)
		default:
		}
		net.Resume("a1")
		if err := <-done; err != nil {
			t.Fatalf("Dial after Resume: %v", err)
		}
	})
}

func TestMemCutOneWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		srv := s.srvRec.lastConn()

		s.net.Cut("b1", "a1")
		memSendCancels(t, s.cli, 1, 11) // lost
		memSendCancels(t, srv, 0, 10)   // delivered
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, 1))
		memWantCalls(t, "client", s.cliRec, memSeq(0, 10))
		if d := s.net.Dropped(); d != 10 {
			t.Errorf("Dropped() = %d, want 10", d)
		}

		s.net.Heal("a1", "b1")
		memSendCancels(t, s.cli, 11, 12)
		synctest.Wait()
		memWantCalls(t, "server after heal", s.srvRec, []uint64{0, 11})
		if got := s.cliRec.closeErrs(); len(got) != 0 {
			t.Errorf("a cut closed the connection: %v", got)
		}
	})
}

// BlockDials stops dials one way only: the other node's dial connects,
// and its connection carries frames both ways; Heal lets dials through.
func TestMemBlockDialsOneWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewNetwork()
		defer net.Close()
		aRec, bRec := new(memRec), new(memRec)
		a, b := net.Transport(transport.Config{Node: "a1"}), net.Transport(transport.Config{Node: "b1"})
		if _, err := a.Listen("", aRec); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Listen("", bRec); err != nil {
			t.Fatal(err)
		}
		net.BlockDials("a1", "b1")

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := a.Dial(ctx, "b1", new(memRec)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial a1→b1 with its dials blocked: %v, want DeadlineExceeded", err)
		}
		back := new(memRec)
		c, err := b.Dial(t.Context(), "a1", back)
		if err != nil {
			t.Fatalf("Dial b1→a1: %v", err)
		}
		memSendCancels(t, c, 0, 2)
		synctest.Wait()
		memSendCancels(t, aRec.lastConn(), 0, 3)
		synctest.Wait()
		memWantCalls(t, "a1", aRec, memSeq(0, 2))
		memWantCalls(t, "b1's dialed connection", back, memSeq(0, 3))

		net.Heal("b1", "a1")
		if _, err := a.Dial(t.Context(), "b1", new(memRec)); err != nil {
			t.Fatalf("Dial a1→b1 after Heal: %v", err)
		}
	})
}

func TestMemCutBoth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		srv := s.srvRec.lastConn()

		s.net.CutBoth("a1", "b1")
		memSendCancels(t, s.cli, 1, 5)
		memSendCancels(t, srv, 0, 5)
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, 1))
		memWantCalls(t, "client", s.cliRec, nil)

		// A dial across the cut waits like an unanswered handshake.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := s.net.Transport(transport.Config{Node: "b1"}).Dial(ctx, "a1", new(memRec)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Dial across a cut: %v, want DeadlineExceeded", err)
		}

		s.net.Heal("b1", "a1")
		memSendCancels(t, s.cli, 5, 6)
		memSendCancels(t, srv, 5, 6)
		synctest.Wait()
		memWantCalls(t, "server after heal", s.srvRec, []uint64{0, 5})
		memWantCalls(t, "client after heal", s.cliRec, []uint64{5})
	})
}

func TestMemIsolate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		s.net.Isolate("a1")
		memSendCancels(t, s.cli, 0, 3)
		synctest.Wait()
		memWantCalls(t, "isolated server", s.srvRec, nil)
		s.net.Rejoin("a1")
		memSendCancels(t, s.cli, 3, 4)
		synctest.Wait()
		memWantCalls(t, "rejoined server", s.srvRec, []uint64{3})
	})
}

func TestMemDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		s.net.Delay("b1", "a1", 100*time.Millisecond)
		start := time.Now()
		memSendCancels(t, s.cli, 0, 1)
		time.Sleep(30 * time.Millisecond)
		s.net.Delay("b1", "a1", 0)
		memSendCancels(t, s.cli, 1, 2) // due at once, but must not overtake frame 0
		time.Sleep(time.Second)

		memWantCalls(t, "server", s.srvRec, memSeq(0, 2))
		s.srvRec.mu.Lock()
		defer s.srvRec.mu.Unlock()
		for i, at := range s.srvRec.at {
			if got := at.Sub(start); got != 100*time.Millisecond {
				t.Errorf("frame %d arrived after %v, want 100ms", i, got)
			}
		}
	})
}

func TestMemDelayAddsRoundTripToDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewNetwork()
		defer net.Close()
		if _, err := net.Transport(transport.Config{Node: "a1"}).Listen("", new(memRec)); err != nil {
			t.Fatal(err)
		}
		net.Delay("a1", "b1", 20*time.Millisecond)
		net.Delay("b1", "a1", 30*time.Millisecond)
		start := time.Now()
		if _, err := net.Transport(transport.Config{Node: "b1"}).Dial(t.Context(), "a1", new(memRec)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Errorf("Dial took %v, want 50ms", d)
		}
	})
}

func TestMemDropNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		s.net.DropNext("b1", "a1", 3)
		memSendCancels(t, s.cli, 0, 6)
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(3, 6))
		if d := s.net.Dropped(); d != 3 {
			t.Errorf("Dropped() = %d, want 3", d)
		}
	})
}

func TestMemDropProbability(t *testing.T) {
	run := func(seed uint64) []uint64 {
		var got []uint64
		synctest.Test(t, func(t *testing.T) {
			s := newMemSetup(t, transport.Config{}, transport.Config{})
			s.net.Seed(seed)
			s.net.Drop("b1", "a1", 0.3)
			memSendCancels(t, s.cli, 0, 1000)
			synctest.Wait()
			got = s.srvRec.calls()
			if d := s.net.Dropped(); int(d)+len(got) != 1000 {
				t.Errorf("Dropped() = %d and %d delivered, want 1000 in all", d, len(got))
			}
			for i := 1; i < len(got); i++ {
				if got[i] <= got[i-1] {
					t.Fatalf("out of order: %d after %d", got[i], got[i-1])
				}
			}
		})
		return got
	}
	a, b, c := run(42), run(42), run(43)
	if n := len(a); n < 600 || n > 800 {
		t.Errorf("%d of 1000 delivered with drop 0.3", n)
	}
	if !cmp.Equal(a, b) {
		t.Error("the same seed dropped different frames")
	}
	if cmp.Equal(a, c) {
		t.Error("different seeds dropped the same frames")
	}
}

func TestMemReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		srv := s.srvRec.lastConn()

		s.net.Delay("b1", "a1", time.Second)
		memSendCancels(t, s.cli, 1, 5) // in flight: lost by the reset
		if n := s.net.Reset("b1", "a1"); n != 1 {
			t.Fatalf("Reset broke %d connections, want 1", n)
		}
		time.Sleep(2 * time.Second)
		memWantCalls(t, "server", s.srvRec, memSeq(0, 1))
		for who, r := range map[string]*memRec{"client": s.cliRec, "server": s.srvRec} {
			got := r.closeErrs()
			if len(got) != 1 || !errors.Is(got[0], transport.ErrReset) || !errors.Is(got[0], transport.ErrClosed) {
				t.Errorf("%s closes = %v, want one ErrReset", who, got)
			}
		}
		for who, c := range map[string]transport.Conn{"client": s.cli, "server": srv} {
			if err := c.Send(&frame.Cancel{}); !errors.Is(err, transport.ErrClosed) {
				t.Errorf("%s Send after reset: %v, want ErrClosed", who, err)
			}
		}
		if n := s.net.Reset("b1", "a1"); n != 0 {
			t.Errorf("second Reset broke %d connections", n)
		}
	})
}

func TestMemResetNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		other := new(memRec)
		if _, err := s.net.Transport(transport.Config{Node: "c1"}).Dial(t.Context(), "a1", other); err != nil {
			t.Fatal(err)
		}
		if n := s.net.ResetNode("a1"); n != 2 {
			t.Fatalf("ResetNode broke %d connections, want 2", n)
		}
		synctest.Wait()
		for who, r := range map[string]*memRec{"b1": s.cliRec, "c1": other} {
			if got := r.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrReset) {
				t.Errorf("%s closes = %v, want one ErrReset", who, got)
			}
		}
		if got := s.srvRec.closeErrs(); len(got) != 2 {
			t.Errorf("server got %d closes, want 2", len(got))
		}
	})
}

func TestMemCloseFlushesThenCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		s.net.Delay("b1", "a1", time.Second)
		memSendCancels(t, s.cli, 0, 10)
		if err := s.cli.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.cli.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := s.cli.Send(&frame.Cancel{}); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send after Close: %v, want ErrClosed", err)
		}
		synctest.Wait()
		if got := s.cliRec.closeErrs(); len(got) != 1 || got[0] != nil {
			t.Errorf("closing end got closes %v, want [nil]", got)
		}
		if got := s.srvRec.closeErrs(); len(got) != 0 {
			t.Errorf("peer closed before the queued frames arrived: %v", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, 10))
		if got := s.srvRec.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrClosed) {
			t.Errorf("peer closes = %v, want one ErrClosed", got)
		}
	})
}

func TestMemDialRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		cli := s.net.Transport(transport.Config{Node: "b1"})
		start := time.Now()
		if _, err := cli.Dial(t.Context(), "nowhere", new(memRec)); !errors.Is(err, transport.ErrRefused) {
			t.Errorf("Dial unknown address: %v, want ErrRefused", err)
		}
		if err := s.ln.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Dial(t.Context(), "a1", new(memRec)); !errors.Is(err, transport.ErrRefused) {
			t.Errorf("Dial closed listener: %v, want ErrRefused", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("refusals took %v, want no time", time.Since(start))
		}

		// Open connections survive their listener.
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, 1))

		// A node going down refuses dials and resets its connections.
		if _, err := s.srvTrans.Listen("a1-admin", new(memRec)); err != nil {
			t.Fatal(err)
		}
		if err := s.srvTrans.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Dial(t.Context(), "a1-admin", new(memRec)); !errors.Is(err, transport.ErrRefused) {
			t.Errorf("Dial to a closed transport: %v, want ErrRefused", err)
		}
		synctest.Wait()
		if got := s.cliRec.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrReset) {
			t.Errorf("client of a closed node: closes %v, want [transport.ErrReset]", got)
		}
		if got := s.srvRec.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrClosed) {
			t.Errorf("closed node: closes %v, want [transport.ErrClosed]", got)
		}
	})
}

func TestMemListenErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewNetwork()
		tr := net.Transport(transport.Config{Node: "a1"})
		ln, err := tr.Listen("", new(memRec))
		if err != nil {
			t.Fatal(err)
		}
		if ln.Addr() != "a1" {
			t.Errorf("Addr() = %q, want the node name", ln.Addr())
		}
		if _, err := tr.Listen("a1", new(memRec)); err == nil {
			t.Error("second Listen on the same address succeeded")
		}
		net.Close()
		if _, err := tr.Listen("other", new(memRec)); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Listen on a closed network: %v, want ErrClosed", err)
		}
		if _, err := tr.Dial(t.Context(), "a1", new(memRec)); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Dial on a closed network: %v, want ErrClosed", err)
		}
	})
}

func TestMemQueueFullWhilePaused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{Node: "b1", SendQueueBytes: 100})
		s.net.Pause("a1")
		var sent uint64
		var err error
		for ; sent < 1000; sent++ {
			if err = s.cli.Send(&frame.Cancel{Call: sent}); err != nil {
				break
			}
		}
		if !errors.Is(err, transport.ErrQueueFull) {
			t.Fatalf("after %d sends: %v, want ErrQueueFull", sent, err)
		}
		// A frame.Cancel of a small call is 7 bytes on the wire: 14 fit in 100.
		if sent != 14 {
			t.Errorf("%d frames fit in 100 bytes, want 14", sent)
		}
		if st := s.cli.(conncap.StatsConn).Stats(); st.QueueFull != 1 || st.FramesSent != sent {
			t.Errorf("stats %+v", st)
		}
		s.net.Resume("a1")
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, sent))
		if err := s.cli.Send(&frame.Cancel{Call: sent}); err != nil {
			t.Errorf("Send after the queue drained: %v", err)
		}
	})
}

func TestMemFrameSizeLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet := slog.New(slog.DiscardHandler) // the rejected frame is logged
		s := newMemSetup(t, transport.Config{Node: "a1", MaxFrameSize: 64, Logger: quiet}, transport.Config{Node: "b1", MaxFrameSize: 128})
		big := &frame.Attempt{Payload: make([]byte, 200)}
		if err := s.cli.Send(big); !errors.Is(err, transport.ErrFrameTooLarge) {
			t.Fatalf("Send over the sender's limit: %v, want ErrFrameTooLarge", err)
		}
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, 1))

		// Within the sender's limit but over the receiver's, which its
		// frame.Hello announced: Send refuses it and the connection carries on.
		if err := s.cli.Send(&frame.Attempt{Payload: make([]byte, 80)}); !errors.Is(err, transport.ErrFrameTooLarge) {
			t.Fatalf("Send over the receiver's limit: %v, want ErrFrameTooLarge", err)
		}
		memSendCancels(t, s.cli, 1, 2)
		synctest.Wait()
		memWantCalls(t, "server", s.srvRec, memSeq(0, 2))
		if got := s.cliRec.closeErrs(); len(got) != 0 {
			t.Errorf("sender closes = %v, want none", got)
		}
		if err := s.cli.Send(nil); !errors.Is(err, transport.ErrMalformedFrame) {
			t.Errorf("Send(nil): %v, want ErrMalformedFrame", err)
		}
	})
}

func TestMemNetworkCloseEndsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		s.net.Pause("a1")
		memSendCancels(t, s.cli, 1, 3)
		dialErr := make(chan error, 1)
		go func() {
			_, err := s.net.Transport(transport.Config{Node: "c1"}).Dial(t.Context(), "a1", new(memRec))
			dialErr <- err
		}()
		synctest.Wait()
		s.net.Close()
		if err := <-dialErr; !errors.Is(err, transport.ErrClosed) {
			t.Errorf("waiting Dial: %v, want ErrClosed", err)
		}
		synctest.Wait()
		for who, r := range map[string]*memRec{"client": s.cliRec, "paused server": s.srvRec} {
			if got := r.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrClosed) {
				t.Errorf("%s closes = %v, want one ErrClosed", who, got)
			}
		}
		memWantCalls(t, "server", s.srvRec, memSeq(0, 1))
	})
}

func TestMemConcurrentSendersKeepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		const senders, each = 8, 200
		var wg sync.WaitGroup
		for g := range uint64(senders) {
			wg.Go(func() {
				for i := range uint64(each) {
					if err := s.cli.Send(&frame.Cancel{Call: g<<32 | i}); err != nil {
						t.Errorf("Send: %v", err)
						return
					}
					if i%16 == 0 {
						time.Sleep(time.Millisecond) // interleave the senders
					}
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		got := s.srvRec.calls()
		if len(got) != senders*each {
			t.Fatalf("received %d frames, want %d", len(got), senders*each)
		}
		next := make([]uint64, senders)
		for _, c := range got {
			g, i := c>>32, c&(1<<32-1)
			if i != next[g] {
				t.Fatalf("sender %d: frame %d arrived when %d was due", g, i, next[g])
			}
			next[g]++
		}
	})
}

func TestMemCloseFromHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newMemSetup(t, transport.Config{}, transport.Config{})
		s.srvRec.onRecv = func(c transport.Conn, f frame.Frame) {
			if err := c.Close(); err != nil {
				t.Errorf("Close in HandleFrame: %v", err)
			}
		}
		// One frame only: the close races with any later Send.
		memSendCancels(t, s.cli, 0, 1)
		synctest.Wait()
		if got := s.srvRec.calls(); len(got) == 0 || got[0] != 0 {
			t.Errorf("server received %v, want to start with 0", got)
		}
		if got := s.srvRec.closeErrs(); len(got) != 1 || got[0] != nil {
			t.Errorf("server closes = %v, want [nil]", got)
		}
		if got := s.cliRec.closeErrs(); len(got) != 1 || !errors.Is(got[0], transport.ErrClosed) {
			t.Errorf("client closes = %v, want one ErrClosed", got)
		}
	})
}

// TestMemRealClock runs outside a bubble: the transport works on the real
// clock too. Only generous bounds.
func TestMemRealClock(t *testing.T) {
	net := NewNetwork()
	defer net.Close()
	if _, err := net.Transport(transport.Config{Node: "a1"}).Listen("", memEcho{}); err != nil {
		t.Fatal(err)
	}
	net.Delay("a1", "b1", time.Millisecond)
	res := make(memResults, 1)
	c, err := net.Transport(transport.Config{Node: "b1"}).Dial(t.Context(), "a1", res)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(&frame.Attempt{Call: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("no result within 10s")
	}
}

// memCounter counts frames and signals every n-th.
type memCounter struct {
	n     int
	count int
	tick  chan struct{}
}

func (c *memCounter) HandleFrame(transport.Conn, frame.Frame) {
	if c.count++; c.count%c.n == 0 {
		c.tick <- struct{}{}
	}
}

func (c *memCounter) HandleClose(transport.Conn, error) {}

// BenchmarkMemSendHeartbeat measures one-way throughput: Send, encode,
// queue, decode and deliver a one-item heartbeat.
func BenchmarkMemSendHeartbeat(b *testing.B) {
	net := NewNetwork()
	defer net.Close()
	const batch = 64
	srv := &memCounter{n: batch, tick: make(chan struct{}, 1)}
	if _, err := net.Transport(transport.Config{Node: "a1"}).Listen("", srv); err != nil {
		b.Fatal(err)
	}
	c, err := net.Transport(transport.Config{Node: "b1"}).Dial(context.Background(), "a1", &memCounter{n: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	hb := &frame.Heartbeat{Items: []frame.HeartbeatItem{{Call: 12345}}}
	b.ReportAllocs()
	sent := 0
	for b.Loop() {
		if err := c.Send(hb); err != nil {
			b.Fatal(err)
		}
		if sent++; sent%batch == 0 {
			<-srv.tick // bound the queue
		}
	}
}

// memEcho answers every frame.Attempt with a frame.Result.
type memEcho struct{}

func (memEcho) HandleFrame(c transport.Conn, f frame.Frame) {
	if a, ok := f.(*frame.Attempt); ok {
		_ = c.Send(&frame.Result{Call: a.Call, Payload: a.Payload})
	}
}

func (memEcho) HandleClose(transport.Conn, error) {}

type memResults chan struct{}

func (r memResults) HandleFrame(transport.Conn, frame.Frame) { r <- struct{}{} }
func (r memResults) HandleClose(transport.Conn, error)       {}

// BenchmarkMemRoundTrip measures an Attempt and its Result, one at a time.
func BenchmarkMemRoundTrip(b *testing.B) {
	net := NewNetwork()
	defer net.Close()
	if _, err := net.Transport(transport.Config{Node: "a1"}).Listen("", memEcho{}); err != nil {
		b.Fatal(err)
	}
	res := make(memResults, 1)
	c, err := net.Transport(transport.Config{Node: "b1"}).Dial(context.Background(), "a1", res)
	if err != nil {
		b.Fatal(err)
	}
	att := &frame.Attempt{Service: "Accounts", Method: "Withdraw", Entities: []string{"acc-1"}, Payload: make([]byte, 64)}
	b.ReportAllocs()
	for b.Loop() {
		att.Call++
		if err := c.Send(att); err != nil {
			b.Fatal(err)
		}
		<-res
	}
}

// batchRec records the Calls of the frames it gets and, as "end", where
// their batches end (conncap.BatchEnder).
type batchRec struct {
	mu     sync.Mutex
	events []string
}

func (b *batchRec) HandleFrame(_ transport.Conn, f frame.Frame) {
	b.mu.Lock()
	b.events = append(b.events, fmt.Sprint(f.(*frame.Cancel).Call))
	b.mu.Unlock()
}

func (b *batchRec) HandleBatchEnd() {
	b.mu.Lock()
	b.events = append(b.events, "end")
	b.mu.Unlock()
}

func (b *batchRec) HandleClose(transport.Conn, error) {}

// As a stream's reader does, a pipe tells a BatchEnder where each batch
// of frames ends: every frame is followed by an end before the pipe waits,
// and no end comes without a frame before it.
func TestPipeEndsBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		defer n.Close()
		rec := new(batchRec)
		if _, err := n.Transport(transport.Config{Node: "a1", Group: "a"}).Listen("a1", rec); err != nil {
			t.Fatal(err)
		}
		cli, err := n.Transport(transport.Config{Node: "b1", Group: "b"}).Dial(t.Context(), "a1", new(memRec))
		if err != nil {
			t.Fatal(err)
		}
		memSendCancels(t, cli, 1, 4)
		synctest.Wait()
		memSendCancels(t, cli, 4, 5)
		synctest.Wait()
		rec.mu.Lock()
		got := slices.Clone(rec.events)
		rec.mu.Unlock()
		var calls []string
		for i, e := range got {
			if e == "end" {
				if i == 0 || got[i-1] == "end" {
					t.Errorf("an end without a frame before it: %v", got)
				}
				continue
			}
			calls = append(calls, e)
		}
		if want := []string{"1", "2", "3", "4"}; !slices.Equal(calls, want) {
			t.Errorf("frames %v, want %v", calls, want)
		}
		if i := slices.Index(got, "4"); i < 0 || i == len(got)-1 || got[i-1] != "end" || got[len(got)-1] != "end" {
			t.Errorf("events %v: want each batch ended before the pipe waits", got)
		}
	})
}
