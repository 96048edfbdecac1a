package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrBudgetExhausted is matched (errors.Is) by the error of an operation
// that ended because no failover token could be had (ReasonBudget).
var ErrBudgetExhausted = errors.New("ffgen: failover budget exhausted")

// BudgetSettings configure a client's failover budget: a token bucket that
// every failover draws from, so that a sick cluster is not hit by a storm
// of retries from every caller at once.
type BudgetSettings struct {
	// Rate is how many tokens are added per second. Zero disables the
	// budget: every failover is allowed. Default 100.
	Rate float64
	// Burst is the bucket's size, and how many tokens it starts with; at
	// least 1 when Rate is positive. Default 50.
	Burst int
	// Wait is how long a failover may wait for a token before it fails
	// with ErrBudgetExhausted. Zero fails at once. Default 0: waiting for
	// a token only adds to the latency that failover exists to avoid.
	Wait time.Duration
}

// Default failover budget.
const (
	DefaultBudgetRate  = 100
	DefaultBudgetBurst = 50
)

// DefaultBudgetSettings returns the default failover budget.
func DefaultBudgetSettings() BudgetSettings {
	return BudgetSettings{Rate: DefaultBudgetRate, Burst: DefaultBudgetBurst}
}

func (s BudgetSettings) validate() []error {
	var errs []error
	switch {
	case math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) || s.Rate < 0:
		errs = append(errs, invalid("Budget.Rate (%v) must be a finite number, zero (no budget) or positive", s.Rate))
	case s.Rate > 0 && s.Burst < 1:
		errs = append(errs, invalid("Budget.Burst (%d) must be at least 1 when Budget.Rate (%v) is positive", s.Burst, s.Rate))
	}
	if s.Burst < 0 {
		errs = append(errs, invalid("Budget.Burst (%d) must not be negative", s.Burst))
	}
	if s.Wait < 0 {
		errs = append(errs, invalid("Budget.Wait (%v) must not be negative", s.Wait))
	}
	return errs
}

// budget is a token bucket of failovers, safe for concurrent use. A nil
// *budget, or one made with a zero Rate, allows everything. Time comes
// from time.Now and time.Timer, so it runs on the fake clock of a
// testing/synctest bubble.
//
// It is kept as a generic cell rate algorithm: one token every interval,
// with tat the time at which the bucket would be full again. Integer
// durations keep it exact: a token taken the moment it is due is never
// refused for rounding.
type budget struct {
	interval time.Duration // time per token; 0: unlimited
	slack    time.Duration // (Burst-1) * interval: how far tat may run ahead of now
	wait     time.Duration

	mu  sync.Mutex // guards tat
	tat time.Time  // theoretical arrival time of the next token beyond the burst
}

// newBudget returns a full bucket. Settings are expected to be valid
// (Settings.Validate); a non-positive or non-finite Rate gives an
// unlimited budget.
func newBudget(s BudgetSettings) *budget {
	b := &budget{wait: max(s.Wait, 0)}
	if s.Rate > 0 && !math.IsInf(s.Rate, 0) {
		b.interval = max(time.Duration(float64(time.Second)/s.Rate), 1)
		b.slack = time.Duration(max(s.Burst, 1)-1) * b.interval
		b.tat = time.Now()
	}
	return b
}

// Take takes one token. With none left it waits up to the Wait setting,
// and no longer than ctx, for one; if that is not enough it returns an
// error matching ErrBudgetExhausted (and ctx's error, if ctx ended the
// wait). Over any span of time no more than Burst plus Rate per second
// tokens are granted.
func (b *budget) Take(ctx context.Context) error {
	if b == nil || b.interval == 0 {
		return nil
	}
	b.mu.Lock()
	now := time.Now()
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	// delay is how long until the next token is due; a taker that accepts
	// it reserves the token now, so waiting takers queue in order.
	delay := tat.Sub(now) - b.slack
	if delay > 0 {
		if delay > b.wait {
			b.mu.Unlock()
			return fmt.Errorf("%w: no token within %v", ErrBudgetExhausted, b.wait)
		}
		if dl, ok := ctx.Deadline(); ok && dl.Sub(now) < delay {
			b.mu.Unlock()
			return fmt.Errorf("%w: no token before the deadline", ErrBudgetExhausted)
		}
	}
	b.tat = tat.Add(b.interval)
	b.mu.Unlock()
	if delay <= 0 {
		return nil
	}

	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		// Give the reservation back; takers queued behind it keep theirs.
		b.mu.Lock()
		b.tat = b.tat.Add(-b.interval)
		b.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrBudgetExhausted, context.Cause(ctx))
	}
}

// Available returns how many tokens could be taken now without waiting;
// -1 for an unlimited budget. For metrics and tests.
func (b *budget) Available() int {
	if b == nil || b.interval == 0 {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ahead := max(time.Until(b.tat), 0) // time already spent in advance
	return max(int((b.slack+b.interval-ahead)/b.interval), 0)
}
