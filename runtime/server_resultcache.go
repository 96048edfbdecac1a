package runtime

import (
	"time"

	"github.com/ffgen/ffgen/internal/frame"
)

// resultCache remembers finished operations by ID, bounded in count and age,
// so a repeated attempt on the same node is answered, not executed again.
// Entries are evicted oldest first; insertion order is time order.
type resultCache struct {
	max   int
	ttl   time.Duration
	m     map[[16]byte]cachedResult
	order [][16]byte // ring of keys, oldest at head
	head  int
}

type cachedResult struct {
	at     time.Time
	result frame.Result
}

func (c *resultCache) get(id [16]byte, now time.Time) (frame.Result, bool) {
	r, ok := c.m[id]
	if !ok || now.Sub(r.at) > c.ttl {
		return frame.Result{}, false
	}
	return r.result, true
}

func (c *resultCache) put(id [16]byte, r frame.Result, now time.Time) {
	for len(c.m) > 0 {
		oldest := c.order[c.head]
		if len(c.m) < c.max && now.Sub(c.m[oldest].at) <= c.ttl {
			break
		}
		delete(c.m, oldest)
		c.head++
		if c.head == len(c.order) {
			c.order, c.head = c.order[:0], 0
		}
	}
	if c.head > len(c.order)/2 && c.head > 64 {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
	if _, ok := c.m[id]; !ok {
		c.order = append(c.order, id)
	}
	c.m[id] = cachedResult{at: now, result: r}
}

// resultBuf is where e's result is encoded: e's own buffer when the result
// is not remembered (the frame copies it, and it is not needed after),
// else a slice of its own for the cache to keep.
//
// An attempt that joins while the handler runs may set remember after the
// choice was made: the cache then keeps a slice of e's own buffer, which
// nothing writes again once e has ended.
func (e *execution) resultBuf() []byte {
	if e.remember.Load() {
		return nil
	}
	return e.resBuf[:0]
}
