package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Close drops the operations queued behind a running one: none of them runs
// after the server was closed.
func TestQueuedOperationDoesNotRunAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		p := e.ledgers[own[0]]
		p.SetHook(func(ctx context.Context, _ string, amount int64) error {
			if amount == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		go e.ledger.Add(t.Context(), "acct", 1)
		synctest.Wait()
		go e.ledger.Add(t.Context(), "acct", 2) // queued behind the first
		synctest.Wait()
		e.Cluster.Node(own[0]).Server.Close()
		synctest.Wait()
		if got := p.Balances()["acct"]; got != 0 {
			t.Errorf("closed server %s ran a queued handler afterwards: balance %d", own[0], got)
		}
		time.Sleep(time.Second)
	})
}

// When the forwarding node's connection breaks while the client dials the
// redirect target, the stale close event is ignored: the attempt completes
// on the target, which is not suspected.
func TestRedirectIgnoresTheOldConnectionsClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{PerGroup: 2})
		own := e.owners(t, "acct")
		var target string
		for _, n := range e.Nodes {
			if n.Group == e.Cluster.Node(own[0]).Group && n.Name != own[0] {
				target = n.Name
			}
		}
		e.Net.Delay("client1", target, 50*time.Millisecond) // the dial to the target takes a while
		e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error {
			go func() { time.Sleep(10 * time.Millisecond); e.Cluster.Crash(own[0]) }()
			return runtime.ForwardTo(target)
		})
		_, err := e.ledger.Add(t.Context(), "acct", 2)
		if e.client.Suspected(target) {
			t.Errorf("healthy redirect target %s suspected (err=%v)", target, err)
		}
		var fe *runtime.Error
		if errors.As(err, &fe) || e.ledgers[own[1]].Executions() != 0 {
			t.Errorf("redirected attempt abandoned: err=%v, %s ran %d times", err, own[1], e.ledgers[own[1]].Executions())
		}
	})
}

// The heartbeat interval comes from the network and is bounded: an attempt
// asking for 1ns does not make the server heartbeat in a busy loop.
func TestHeartbeatIntervalFromTheNetworkIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		e.ledgers["a1"].SetHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return nil })
		var mu sync.Mutex
		beats := 0
		h := frameFunc(func(f frame.Frame) {
			if _, ok := f.(*frame.Heartbeat); ok {
				mu.Lock()
				beats++
				mu.Unlock()
			}
		})
		tr := e.Net.Transport(transport.Config{Node: "evil"})
		c, err := tr.Dial(t.Context(), "a1", h)
		if err != nil {
			t.Fatal(err)
		}
		args := (&testledger.AddArgs{Account: "acct", Amount: 1}).AppendFF(nil)
		c.Send(&frame.Attempt{Call: 1, Timeout: time.Second, Heartbeat: time.Nanosecond,
			Service: "test.Ledger", Method: "Add", Entities: []string{"acct"}, Payload: args})
		time.Sleep(10 * time.Microsecond)
		mu.Lock()
		n := beats
		mu.Unlock()
		c.Close()
		if n > 10 {
			t.Errorf("%d heartbeats in 10µs: the server trusts a 1ns interval", n)
		}
		time.Sleep(2 * time.Second)
	})
}

// A handler stopped by the engine (a cancel, its attempt deadline) answers
// Failover and is not remembered: a later attempt of the operation on that
// node runs it.
func TestStoppedHandlerIsNotRememberedAsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.SuspectFor = 0
		s.MaxFailovers = 2
		e := newEnv(t, fftest.Config{Settings: s})
		own := e.owners(t, "acct")
		first := true
		var mu sync.Mutex
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			mu.Lock()
			f := first
			first = false
			mu.Unlock()
			if f {
				e.Net.Pause(own[0]) // a GC pause: the client fails over and cancels
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		})
		e.ledgers[own[1]].SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		go func() { time.Sleep(300 * time.Millisecond); e.Net.Resume(own[0]) }()
		got, err := e.ledger.Add(t.Context(), "acct", 3)
		if err != nil {
			t.Errorf("Add = %d, %v; want %s to run the third attempt", got, err, own[0])
		}
	})
}

type frameFunc func(frame.Frame)

func (f frameFunc) HandleFrame(_ transport.Conn, fr frame.Frame) { f(fr) }
func (f frameFunc) HandleClose(transport.Conn, error)            {}
