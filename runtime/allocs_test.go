package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime/fftest"
)

// maxCallAllocs is the budget for one call, client and server
// together. What a call cannot avoid: the arguments the generated client
// packs and the server decodes (with their strings), the reply on both
// sides, the server's execution, its goroutine, and the entity's string.
const maxCallAllocs = 10

// One call's allocations, client and server together (both run in this
// process), over the in-memory transport, which encodes and decodes every
// frame as TCP does.
func TestCallAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: counts are not the program's (make test runs this test without it)")
	}
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		for _, l := range e.ledgers {
			l.Lean = true
		}
		ctx := context.Background()
		if _, err := e.ledger.Add(ctx, "acct", 1); err != nil {
			t.Fatal(err)
		}
		n := testing.AllocsPerRun(200, func() {
			if _, err := e.ledger.Add(ctx, "acct", 1); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%.1f allocations per call, client and server", n)
		if n > maxCallAllocs {
			t.Errorf("%.1f allocations per call, client and server; want at most %d", n, maxCallAllocs)
		}
		if got, err := e.ledger.Add(ctx, "acct", 0); err != nil || got != 202 {
			t.Errorf("balance after 202 calls of +1: %d, %v", got, err)
		}
	})
}

// A heartbeat, from the server's ticker through the frame to the client's
// record of every attempt it names, allocates nothing: with 100 attempts in
// flight, each heartbeat interval costs no allocation on either side.
func TestHeartbeatAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: counts are not the program's (make test runs this test without it)")
	}
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		release := make(chan struct{})
		// A failure must not leave the handlers blocked: the bubble
		// would wait for them forever.
		releaseOnce := sync.OnceFunc(func() { close(release) })
		defer releaseOnce()
		for _, l := range e.ledgers {
			l.SetHook(func(context.Context, string, int64) error {
				<-release
				return nil
			})
		}
		const inFlight = 100
		errs := make(chan error, inFlight)
		var wg sync.WaitGroup
		for i := range inFlight {
			wg.Go(func() {
				_, err := e.ledger.Add(context.Background(), fmt.Sprintf("hb-%d", i), 1)
				errs <- err
			})
		}
		interval := e.Settings.HeartbeatInterval
		time.Sleep(interval) // the first heartbeat grows the buffers
		synctest.Wait()
		n := testing.AllocsPerRun(20, func() {
			time.Sleep(interval)
			synctest.Wait()
		})
		// 21 intervals are ten heartbeat timeouts: the attempts are still
		// running only because every heartbeat arrived.
		if len(errs) > 0 {
			t.Fatalf("an attempt ended while its handler ran: %v", <-errs)
		}
		releaseOnce()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Add: %v", err)
			}
		}
		if n != 0 {
			t.Errorf("%.1f allocations per heartbeat interval with %d attempts in flight; want 0", n, inFlight)
		}
	})
}
