package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
)

// queueRun sends n calls of one entity to a node whose handler of that
// entity takes step, all at once: the i-th waits i steps to start. It
// returns the node, the calls' errors (once wait is called) and an entity
// of another that the node owns.
func queueRun(t *testing.T, e *env, ledger *testledger.Client, n int, step time.Duration) (own, other string, wait func() []error) {
	t.Helper()
	own = e.owners(t, "hot")[0]
	other = e.ownedBy(t, own, "cold", 1)[0]
	e.ledgers[own].SetHook(func(ctx context.Context, acct string, _ int64) error {
		if acct == "hot" {
			time.Sleep(step)
		}
		return nil
	})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = ledger.Add(t.Context(), "hot", 1) })
	}
	synctest.Wait()
	return own, other, func() []error { wg.Wait(); return errs }
}

// A queue that stands (every operation that started for an interval
// waited longer than QueueDelay) is one the node stops adding to: an
// attempt that arrives while as many operations wait as the node starts
// in the target is refused at once with the typed error, unrun, nothing
// failed over and nobody suspected, however few wait against MaxQueued;
// once the queue is gone the node takes calls again.
func TestOverloadBoundsQueueDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxQueued = -1 // the delay alone
			cfg.QueueDelay = runtime.SuggestedQueueDelay
		}})
		m := &failoverCounter{}
		client := e.Client(t, func(c *runtime.ClientConfig) { c.Metrics = m })
		ledger := testledger.NewClient(client)
		synctest.Wait()
		// 200 calls of 2 ms: those that start in the second 100 ms waited
		// 100 ms or more.
		const n, step = 200, 2 * time.Millisecond
		own, other, wait := queueRun(t, e, ledger, n, step)
		time.Sleep(250 * time.Millisecond)
		if ld := e.Node(own).Server.Load(); ld.QueueDelay <= ld.QueueDelayLimit || ld.QueueDelayLimit < runtime.SuggestedQueueDelay {
			t.Errorf("%s's load %+v, want a median wait over its limit, the unloaded wait plus %v", own, ld, runtime.SuggestedQueueDelay)
		}
		start := time.Now()
		_, err := ledger.Add(t.Context(), other, 1)
		if !errors.Is(err, runtime.ErrOverloaded) || runtime.MaybeExecuted(err) {
			t.Fatalf("call while the queue stands: err = %v, want ErrOverloaded, not executed", err)
		}
		var oe *runtime.OverloadError
		if !errors.As(err, &oe) || !strings.Contains(oe.Detail, "QueueDelay") {
			t.Errorf("%v: want an OverloadError naming QueueDelay", err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("the refusal took %v, want at once", took)
		}
		for i, err := range wait() {
			if err != nil {
				t.Errorf("call %d, taken on before the queue stood: %v", i, err)
			}
		}
		checkRefusedUnrun(t, e, client, m, own, n)
		time.Sleep(time.Second)
		if _, err := ledger.Add(t.Context(), other, 1); err != nil {
			t.Errorf("call once the queue is gone: %v", err)
		}
	})
}
