package memnet

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/pool"
	"github.com/ffgen/ffgen/runtime/transport"
)

// echoAll sends every frame back.
type echoAll struct{}

func (echoAll) HandleFrame(c transport.Conn, f frame.Frame) { c.Send(f) }
func (echoAll) HandleClose(transport.Conn, error)           {}

// chanRec passes on the Cancel frames and the closes it gets.
type chanRec struct {
	frames chan frame.Frame
	closes chan chanClose
}

type chanClose struct {
	c   transport.Conn
	err error
}

func newChanRec() *chanRec {
	return &chanRec{frames: make(chan frame.Frame, 16), closes: make(chan chanClose, 16)}
}

func (r *chanRec) HandleFrame(_ transport.Conn, f frame.Frame) {
	if c, ok := f.(*frame.Cancel); ok {
		r.frames <- &frame.Cancel{Call: c.Call} // the frame is only valid during the call
	}
}

func (r *chanRec) HandleClose(c transport.Conn, err error) { r.closes <- chanClose{c, err} }

// The pool over the in-memory transport, in fake time: a reset drops the
// connection, a dead address backs off, and a restarted listener is found.
func TestPoolOverMemTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		defer n.Close()
		srvT := n.Transport(transport.Config{Node: "a1", Group: "a"})
		l, err := srvT.Listen("a1", echoAll{})
		if err != nil {
			t.Fatal(err)
		}
		cli := newChanRec()
		p := pool.New(n.Transport(transport.Config{Node: "b1", Group: "b"}), cli, transport.PoolConfig{BackoffMin: time.Second, BackoffMax: time.Second})
		defer p.Close()
		ctx := context.Background()

		first, err := p.Get(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Send(&frame.Cancel{Call: 1}); err != nil {
			t.Fatal(err)
		}
		if got := (<-cli.frames).(*frame.Cancel).Call; got != 1 {
			t.Fatalf("echo %d", got)
		}

		l.Close()
		n.ResetNode("a1")
		if cl := <-cli.closes; cl.c != first || !errors.Is(cl.err, transport.ErrClosed) {
			t.Fatalf("close of %v with %v", cl.c, cl.err)
		}
		if _, err := p.Get(ctx, "a1"); !errors.Is(err, transport.ErrRefused) {
			t.Fatalf("Get with nothing listening: %v, want transport.ErrRefused", err)
		}
		if _, err = srvT.Listen("a1", echoAll{}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Get(ctx, "a1"); !errors.Is(err, transport.ErrRefused) {
			t.Fatalf("Get inside the backoff window: %v, want the earlier transport.ErrRefused", err)
		}
		time.Sleep(time.Second)
		second, err := p.Get(ctx, "a1")
		if err != nil || second == first {
			t.Fatalf("Get after the window: %v, %v", second, err)
		}
		if err := second.Send(&frame.Cancel{Call: 2}); err != nil {
			t.Fatal(err)
		}
		if got := (<-cli.frames).(*frame.Cancel).Call; got != 2 {
			t.Fatalf("echo %d", got)
		}
	})
}

// A pooled connection's handler hears where the batches of frames it gets
// end, as the handler of a connection dialed without the pool does: a
// server steps the raft messages a batch brought there, and the pool's
// wrapper that kept the end to itself left a leader's messages, sent on
// the connection the follower had dialed, waiting for the follower's next
// tick.
func TestPoolPassesBatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork()
		defer n.Close()
		if _, err := n.Transport(transport.Config{Node: "a1", Group: "a"}).Listen("a1", echoAll{}); err != nil {
			t.Fatal(err)
		}
		rec := new(batchRec)
		p := pool.New(n.Transport(transport.Config{Node: "b1", Group: "b"}), rec, transport.PoolConfig{})
		defer p.Close()
		c, err := p.Get(t.Context(), "a1")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(&frame.Cancel{Call: 7}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		rec.mu.Lock()
		got := slices.Clone(rec.events)
		rec.mu.Unlock()
		if want := []string{"7", "end"}; !slices.Equal(got, want) {
			t.Errorf("the pool's handler heard %v, want %v", got, want)
		}
	})
}
