package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestBudgetBurstThenExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(BudgetSettings{Rate: 10, Burst: 3})
		ctx := context.Background()
		for i := range 3 {
			if err := b.Take(ctx); err != nil {
				t.Fatalf("take %d: %v", i, err)
			}
		}
		if got := b.Available(); got != 0 {
			t.Fatalf("Available() = %d after the burst, want 0", got)
		}
		err := b.Take(ctx)
		if !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("take past the burst: %v, want ErrBudgetExhausted", err)
		}
	})
}

func TestBudgetRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(BudgetSettings{Rate: 10, Burst: 2}) // one token per 100ms
		ctx := context.Background()
		_, _ = b.Take(ctx), b.Take(ctx)

		time.Sleep(99 * time.Millisecond)
		if err := b.Take(ctx); !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("take before 1/Rate: %v, want ErrBudgetExhausted", err)
		}
		time.Sleep(time.Millisecond)
		if err := b.Take(ctx); err != nil {
			t.Fatalf("take at exactly 1/Rate: %v", err)
		}
		if err := b.Take(ctx); !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("second take after one refill: %v, want ErrBudgetExhausted", err)
		}

		// A long idle time refills up to Burst, no more.
		time.Sleep(time.Hour)
		if got := b.Available(); got != 2 {
			t.Fatalf("Available() after an hour = %d, want Burst 2", got)
		}
	})
}

func TestBudgetWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(BudgetSettings{Rate: 10, Burst: 1, Wait: 150 * time.Millisecond})
		ctx := context.Background()
		start := time.Now()
		if err := b.Take(ctx); err != nil {
			t.Fatal(err)
		}
		// The next token is due in 100ms: within the wait.
		if err := b.Take(ctx); err != nil {
			t.Fatalf("take within the wait: %v", err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Fatalf("waited %v, want 100ms", d)
		}
		// One waiter reserves the token due at 200ms; the next would be due
		// at 300ms, 200ms away: beyond the wait, so it fails at once.
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := b.Take(ctx); err != nil {
				t.Errorf("queued take: %v", err)
			}
		})
		synctest.Wait()
		before := time.Now()
		if err := b.Take(ctx); !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("take beyond the wait: %v, want ErrBudgetExhausted", err)
		}
		if time.Since(before) != 0 {
			t.Fatalf("a take that cannot succeed within the wait waited %v", time.Since(before))
		}
		wg.Wait()
		if d := time.Since(start); d != 200*time.Millisecond {
			t.Fatalf("queued take ended at %v, want 200ms", d)
		}
	})
}

func TestBudgetWaitHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(BudgetSettings{Rate: 1, Burst: 1, Wait: 10 * time.Second})
		_ = b.Take(context.Background())

		// A deadline before the token is due fails at once.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := b.Take(ctx); !errors.Is(err, ErrBudgetExhausted) || time.Since(start) != 0 {
			t.Fatalf("take with a short deadline: %v after %v, want ErrBudgetExhausted at once", err, time.Since(start))
		}

		// Cancelling a waiting take returns its reservation.
		ctx, cancel = context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- b.Take(ctx) }()
		time.Sleep(300 * time.Millisecond)
		cancel()
		err := <-done
		if !errors.Is(err, ErrBudgetExhausted) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled take: %v, want ErrBudgetExhausted and context.Canceled", err)
		}
		time.Sleep(700 * time.Millisecond) // 1s after the first take: one token is due
		if got := b.Available(); got != 1 {
			t.Fatalf("Available() = %d after the cancelled reservation, want 1", got)
		}
	})
}

// TestBudgetConcurrentNeverExceeds runs many takers, waiting and not, for a
// few seconds of fake time and checks that the grants stay within
// Burst + Rate*elapsed at every instant.
func TestBudgetConcurrentNeverExceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, burst = 20, 5
		b := newBudget(BudgetSettings{Rate: rate, Burst: burst, Wait: 120 * time.Millisecond})
		start := time.Now()
		var mu sync.Mutex
		var grants []time.Duration
		var refused atomic.Int64
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := range 40 {
					if err := b.Take(context.Background()); err == nil {
						mu.Lock()
						grants = append(grants, time.Since(start))
						mu.Unlock()
					} else if errors.Is(err, ErrBudgetExhausted) {
						refused.Add(1)
					} else {
						t.Errorf("take: %v", err)
					}
					time.Sleep(time.Duration(7*(w+1)+i%5) * time.Millisecond)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		if refused.Load() == 0 {
			t.Fatal("no take was refused: the test does not stress the budget")
		}
		for i, at := range grants { // grants are in time order: appended under mu as granted
			allowed := burst + int(at.Seconds()*rate)
			if i+1 > allowed {
				t.Fatalf("grant %d at %v exceeds burst+rate*t = %d", i+1, at, allowed)
			}
		}
		if max := burst + int(elapsed.Seconds()*rate); len(grants) > max || len(grants) < max*8/10 {
			t.Fatalf("%d grants in %v, want at most %d and close to it", len(grants), elapsed, max)
		}
	})
}

func TestBudgetUnlimited(t *testing.T) {
	for _, b := range []*budget{nil, newBudget(BudgetSettings{})} {
		for range 1000 {
			if err := b.Take(context.Background()); err != nil {
				t.Fatalf("unlimited budget: %v", err)
			}
		}
		if got := b.Available(); got != -1 {
			t.Fatalf("unlimited Available() = %d, want -1", got)
		}
	}
}
