package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
)

// limitLoad runs callers that add to accounts of one node through
// client until ctx ends, answering as the node's hook does, and samples
// the client's limit to that node every 10 ms while they run: the least
// it took after the time after, and the last.
func limitLoad(t *testing.T, e *env, client *runtime.Client, callers int, hook func(ctx context.Context) error, d, after time.Duration) (own string, ok int64, least, last int) {
	t.Helper()
	own = e.owners(t, "acct0")[0]
	accts := e.ownedBy(t, own, "acct", callers)
	e.ledgers[own].SetHook(func(ctx context.Context, _ string, _ int64) error { return hook(ctx) })
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	ledger := testledger.NewClient(client)
	var answered atomic.Int64
	var wg sync.WaitGroup
	for _, a := range accts {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := ledger.Add(context.Background(), a, 1); err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				answered.Add(1)
			}
		})
	}
	least = -1
	for ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		if l := limitOf(client, own); time.Since(start) > after && (least < 0 || l < least) {
			least = l
		}
	}
	wg.Wait()
	return own, answered.Load(), least, limitOf(client, own)
}

func decreasesOf(c *runtime.Client, node string) runtime.LimitDecreases {
	for _, l := range c.Limits() {
		if l.Node == node {
			return l.Decreases
		}
	}
	return runtime.LimitDecreases{}
}

// A latency that rises with the host's load, and the late answers of a
// busy host (a thread descheduled, now and then a stall of the whole
// process), are no sign that the node has more than it takes: the limit
// stays near the callers' demand. Judged against the fastest recent
// answer, every late answer lowered it, and it fell to Min.
func TestClientLimitRidesLatencyDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const callers = 32
		e := newEnv(t, fftest.Config{})
		client := e.Client(t, func(c *runtime.ClientConfig) {
			c.Limit = runtime.LimitConfig{Enabled: true, Initial: callers, Min: 2, Tolerance: 2}
		})
		synctest.Wait()
		start := time.Now()
		var n atomic.Int64
		hook := func(context.Context) error {
			// 1 ms at first, 8 ms after 4 s, as the host gets busier.
			base := time.Millisecond + time.Since(start)*7/4000
			switch i := n.Add(1); {
			case i%50 == 0:
				time.Sleep(100 * base) // the process stalls
			case i%4 == 0:
				time.Sleep(6 * base) // a thread waits its turn
			default:
				time.Sleep(base)
			}
			return nil
		}
		own, ok, least, last := limitLoad(t, e, client, callers, hook, 5*time.Second, time.Second)
		ds := decreasesOf(client, own)
		t.Logf("%d answered; limit to %s at least %d after the first second, %d at the end; decreases %+v", ok, own, least, last, ds)
		if least < callers {
			t.Errorf("limit to %s fell to %d with a latency that only drifted with the host's load, want at least the %d callers", own, least, callers)
		}
		if ds.Refused != 0 || ds.TimedOut != 0 {
			t.Errorf("decreases %+v: none refused or timed out", ds)
		}
	})
}

// A node that truly slows down, its capacity a tenth of what it was, still
// gets a lower limit from its clients: its answers, queued behind the
// callers' demand, take ten times as long at once, well past the
// tolerance of the baseline that had followed them until then.
func TestClientLimitFallsWhenNodeSlows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const callers, workers = 32, 8
		e := newEnv(t, fftest.Config{})
		client := e.Client(t, func(c *runtime.ClientConfig) {
			c.Limit = runtime.LimitConfig{Enabled: true, Initial: callers, Min: 2, Tolerance: 2}
		})
		synctest.Wait()
		start := time.Now()
		sem := make(chan struct{}, workers) // the node's workers
		hook := func(ctx context.Context) error {
			sem <- struct{}{}
			defer func() { <-sem }()
			if time.Since(start) < time.Second {
				time.Sleep(time.Millisecond)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
			return nil
		}
		own, ok, least, last := limitLoad(t, e, client, callers, hook, 2*time.Second, time.Second)
		ds := decreasesOf(client, own)
		t.Logf("%d answered; limit to %s at least %d after the slowdown, %d at the end; decreases %+v", ok, own, least, last, ds)
		if least > callers/2 {
			t.Errorf("limit to %s stayed at least %d after the node slowed tenfold, want at most half the %d callers", own, least, callers)
		}
		if ds.Slow == 0 {
			t.Errorf("decreases %+v: want some for slow answers", ds)
		}
	})
}
