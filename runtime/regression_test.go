package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/transport"
)

// An unreachable node must not hold up scatter writes to the healthy ones:
// nothing dials under the ordering lock, so concurrent writes all succeed
// within their deadline.
func TestScatterWritesDoNotWaitOnAnUnreachableNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.AttemptTimeout = 500 * time.Millisecond
		s.OperationTimeout = 500 * time.Millisecond
		e := newEnv(t, fftest.Config{Settings: s})
		e.ledger.add = scatterAdd()
		e.Net.Pause("b1") // no connection to b1 yet: every dial to it hangs
		var wg sync.WaitGroup
		var mu sync.Mutex
		var worst time.Duration
		failed := 0
		for range 6 {
			wg.Go(func() {
				start := time.Now()
				_, err := e.ledger.Add(t.Context(), "x", 1)
				mu.Lock()
				defer mu.Unlock()
				worst = max(worst, time.Since(start))
				if err != nil {
					failed++
					t.Logf("after %v: %v", time.Since(start), err)
				}
			})
		}
		wg.Wait()
		e.Net.Resume("b1")
		if failed > 0 {
			t.Errorf("%d of 6 scatter writes failed although a1 is healthy", failed)
		}
		// Each write waits once, in parallel, for the dial to b1 to give up
		// after a heartbeat timeout; none waits for another.
		if worst > s.HeartbeatTimeout {
			t.Errorf("a scatter write returned after %v, want at most one heartbeat timeout (%v)", worst, s.HeartbeatTimeout)
		}
	})
}

// A scatter copy that timed out stays watched: when its connection breaks
// with the write still queued, the node is recorded as having missed it.
func TestScatterWriteLostAfterTimeoutIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		e.ledger.add = scatterAdd()
		if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
			t.Fatal(err)
		}
		e.Net.Pause("b1")
		if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // b1's copy times out on the client
		e.Net.ResetNode("b1")   // its connection breaks, the queued write with it
		e.Net.Resume("b1")
		synctest.Wait()
		a, b := e.ledgers["a1"].balances()["x"], e.ledgers["b1"].balances()["x"]
		if a != b {
			if _, missed := e.client.MissedWrites()["b1"]; !missed {
				t.Errorf("b1 diverged (a1=%d b1=%d) but MissedWrites = %v", a, b, e.client.MissedWrites())
			}
		}
	})
}

// Close drops the operations queued behind a running one: none of them runs
// after the server was closed.
func TestQueuedOperationDoesNotRunAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		p := e.ledgers[own[0]]
		p.setHook(func(ctx context.Context, _ string, amount int64) error {
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
		if got := p.balances()["acct"]; got != 0 {
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
		e.ledgers[own[0]].setHook(func(context.Context, string, int64) error {
			go func() { time.Sleep(10 * time.Millisecond); e.Cluster.Crash(own[0]) }()
			return runtime.ForwardTo(target)
		})
		_, err := e.ledger.Add(t.Context(), "acct", 2)
		if e.client.Suspected(target) {
			t.Errorf("healthy redirect target %s suspected (err=%v)", target, err)
		}
		var fe *runtime.Error
		if errors.As(err, &fe) || e.ledgers[own[1]].executions() != 0 {
			t.Errorf("redirected attempt abandoned: err=%v, %s ran %d times", err, own[1], e.ledgers[own[1]].executions())
		}
	})
}

// The heartbeat interval comes from the network and is bounded: an attempt
// asking for 1ns does not make the server heartbeat in a busy loop.
func TestHeartbeatIntervalFromTheNetworkIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		e.ledgers["a1"].setHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return nil })
		var mu sync.Mutex
		beats := 0
		h := frameFunc(func(f transport.Frame) {
			if _, ok := f.(*transport.Heartbeat); ok {
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
		args := (&ledgerAddArgs{Account: "acct", Amount: 1}).AppendFF(nil)
		c.Send(&transport.Attempt{Call: 1, Timeout: time.Second, Heartbeat: time.Nanosecond,
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
		e.ledgers[own[0]].setHook(func(ctx context.Context, _ string, _ int64) error {
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
		e.ledgers[own[1]].setHook(func(context.Context, string, int64) error { return ErrBusy })
		go func() { time.Sleep(300 * time.Millisecond); e.Net.Resume(own[0]) }()
		got, err := e.ledger.Add(t.Context(), "acct", 3)
		if err != nil {
			t.Errorf("Add = %d, %v; want %s to run the third attempt", got, err, own[0])
		}
	})
}

type frameFunc func(transport.Frame)

func (f frameFunc) HandleFrame(_ transport.Conn, fr transport.Frame) { f(fr) }
func (f frameFunc) HandleClose(transport.Conn, error)                {}
