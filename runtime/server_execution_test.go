package runtime_test

import (
	"context"
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

// rawConn is a connection to a node that sends attempts and cancels by
// hand and records the results it gets, by call.
type rawConn struct {
	t       *testing.T
	c       transport.Conn
	mu      sync.Mutex
	results map[uint64]frame.Status
}

func dialRaw(t *testing.T, e *env, node string) *rawConn {
	r := &rawConn{t: t, results: map[uint64]frame.Status{}}
	h := frameFunc(func(f frame.Frame) {
		if res, ok := f.(*frame.Result); ok {
			r.mu.Lock()
			r.results[res.Call] = res.Status
			r.mu.Unlock()
		}
	})
	c, err := e.Net.Transport(transport.Config{Node: "raw"}).Dial(t.Context(), node, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r.c = c
	return r
}

func (r *rawConn) attempt(call uint64, op byte, account string) {
	args := (&testledger.AddArgs{Account: account, Amount: 1}).AppendFF(nil)
	if err := r.c.Send(&frame.Attempt{Call: call, OpID: [16]byte{op}, Timeout: time.Minute, Heartbeat: time.Second,
		Service: "test.Ledger", Method: "Add", Entities: []string{account}, Payload: args}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) cancel(call uint64) {
	if err := r.c.Send(&frame.Cancel{Call: call}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) result(call uint64) (frame.Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.results[call]
	return st, ok
}

// A running execution whose only waiter cancels is stopped; an attempt of
// the same operation that arrives while it stops makes it run again, and
// that attempt gets the second run's answer.
func TestCancelledExecutionRerunsForALateJoiner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		stopping := make(chan struct{})
		goOn := make(chan struct{})
		var runs int
		e.ledgers["a1"].SetHook(func(ctx context.Context, _ string, _ int64) error {
			runs++
			if runs > 1 {
				return nil // the rerun completes
			}
			<-ctx.Done()
			close(stopping)
			<-goOn // still stopping when the next attempt arrives
			return ctx.Err()
		})
		r := dialRaw(t, e, "a1")
		r.attempt(1, 7, "x")
		synctest.Wait()
		r.cancel(1)
		<-stopping
		r.attempt(2, 7, "x") // joins the execution being stopped
		synctest.Wait()
		close(goOn)
		synctest.Wait()
		if st, ok := r.result(2); !ok || st != frame.StatusOK || runs != 2 {
			t.Errorf("late joiner: result %v (%v), %d runs; want OK from a second run", st, ok, runs)
		}
		if _, ok := r.result(1); ok {
			t.Error("the cancelled attempt was answered")
		}
	})
}

// A queued execution whose only waiter cancels leaves its queue at once
// and never runs; the operation arriving again is a new execution.
func TestCancelledQueuedExecutionLeavesItsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		release := make(chan struct{})
		ran := map[string]int{}
		var mu sync.Mutex
		e.ledgers["a1"].SetHook(func(ctx context.Context, _ string, _ int64) error {
			mu.Lock()
			ran[runtime.AttemptFrom(ctx).OpIDString()[:2]]++
			first := len(ran) == 1 && ran["01"] == 1
			mu.Unlock()
			if first {
				<-release
			}
			return nil
		})
		r := dialRaw(t, e, "a1")
		r.attempt(1, 1, "x") // runs and blocks
		r.attempt(2, 2, "x") // queued behind it
		synctest.Wait()
		if n := len(e.Node("a1").Server.InFlight()); n != 2 {
			t.Fatalf("%d operations in flight, want 2", n)
		}
		r.cancel(2)
		synctest.Wait()
		if ops := e.Node("a1").Server.InFlight(); len(ops) != 1 || ops[0].State != "running" {
			t.Fatalf("in flight after the cancel: %+v; want only the running one", ops)
		}
		r.attempt(3, 2, "x") // the same operation again, queued anew
		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if ran["01"] != 1 || ran["02"] != 1 {
			t.Errorf("runs by operation %v; want each once", ran)
		}
		if st, ok := r.result(3); !ok || st != frame.StatusOK {
			t.Errorf("the operation arriving again: result %v (%v); want OK", st, ok)
		}
		if _, ok := r.result(2); ok {
			t.Error("the cancelled attempt was answered")
		}
	})
}
