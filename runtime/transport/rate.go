package transport

import (
	"math"
	"sync"
	"time"
)

// Defaults for the rate of new connections.
const (
	DefaultAcceptRate  = 500
	DefaultAcceptBurst = 128
)

// rateShedAfter is how long connections must keep arriving faster than
// AcceptRate before the node sheds them: an honest reconnect storm of a
// few hundred connections gets in within it, a sustained flood does not
// fill the backlog with connections that outlive their dialers' timeouts.
const rateShedAfter = time.Second

// acceptBucket is a token bucket on one node's new connections. The
// handshake slots bound the handshakes at a time, but a handshake that
// ends at once frees its slot at once: a flood of connections that
// finish their Hello and are then closed for a bad frame runs a thousand
// complete handshakes in a couple of hundred milliseconds, and the CPU
// they take in that burst, the node's, the kernel's and the dialer's on a
// shared machine, holds up established connections' calls. A rate spreads
// the same work over a longer time, thinly enough to leave them alone.
type acceptBucket struct {
	rate  float64 // tokens a second; set once
	burst float64 // set once

	// mu guards the following.
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// newAcceptBucket returns a full bucket, or nil, which always has a
// token, for a rate <= 0.
func newAcceptBucket(rate, burst int) *acceptBucket {
	if rate <= 0 {
		return nil
	}
	b := float64(max(burst, 1))
	return &acceptBucket{rate: float64(rate), burst: b, tokens: b, last: time.Now()}
}

// take takes a token if there is one; otherwise it reports how long until
// one is due.
func (b *acceptBucket) take() (bool, time.Duration) {
	if b == nil {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - b.tokens) / b.rate * float64(time.Second)))
}

// takeNow is take without the wait, for shedding.
func (b *acceptBucket) takeNow() bool {
	ok, _ := b.take()
	return ok
}
