package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// scatter sends the attempt to every live node that serves the service, the
// suspected ones too; the first final answer wins and the rest run on
// undisturbed, so every node applies the same writes.
func (op *operation) scatter(ctx context.Context) error {
	members := op.c.router.Members(op.m.Service)
	if len(members) == 0 {
		return op.fail(ReasonNoMember, ErrNoRoute)
	}
	// Copies that lose the race keep running after the caller has its
	// answer, so their outcomes can still reveal a node that missed the
	// write; they end by their own timers.
	legCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), op.deadline)
	results := make(chan outcome, len(members))
	op.c.connect(ctx, members, op.s.HeartbeatTimeout)
	// Sends happen under one lock, so every node's connection carries this
	// client's scatter operations in the same order: replicas apply them in
	// the same order (see docs/ARCHITECTURE.md for several clients). The
	// connections were made above, outside the lock.
	var legs sync.WaitGroup
	op.c.scatterMu.Lock()
	for i, m := range members {
		// No dialing under the lock: a node still without a connection
		// misses this write.
		p, o, ok := op.send(legCtx, m, i, transport.FlagScatter, false)
		if !ok {
			op.c.noteScatterLoss(m.Name, o.reason)
			results <- o
			continue
		}
		legs.Go(func() {
			o := op.await(legCtx, p, true)
			op.c.noteScatterLoss(m.Name, o.reason)
			results <- o
		})
	}
	op.c.scatterMu.Unlock()
	go func() {
		legs.Wait()
		cancel()
	}()
	var last outcome
	for range members {
		var o outcome
		select {
		case o = <-results:
		case <-ctx.Done():
			return op.fail(ReasonDeadline, context.Cause(ctx))
		}
		op.record(o)
		if o.final() {
			return op.finish(o)
		}
		last = o
	}
	return op.fail(last.reason, last.err)
}

// noteScatterLoss marks node as having missed a scatter write when the way
// its copy ended shows it did not apply it. A copy that timed out is not
// marked: a frozen node applies its queue when it resumes.
func (c *Client) noteScatterLoss(node string, r Reason) {
	switch r {
	case ReasonQueueFull, ReasonConnBroken, ReasonDialFailed, ReasonFailoverError, ReasonPanic:
		c.missedWrite(node)
	}
}

// connect dials, in parallel, the members that have no connection, waiting
// at most timeout: a scatter must not hold its ordering lock while it dials.
func (c *Client) connect(ctx context.Context, members []Member, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, m := range members {
		if c.pool.Lookup(m.Addr) != nil {
			continue
		}
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			c.pool.Get(dctx, m.Addr) // a failure is found again, at once, by send
		})
	}
	wg.Wait()
}
