package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/ffgen/ffgen/runtime/internal/mdctx"
)

// attemptCtx is a handler's context. It carries the AttemptInfo and the
// call's metadata without a context.WithValue, and the attempt's deadline
// without a context.WithDeadline, whose context, timer and cancel function cost
// four allocations per call. It makes its done channel, and the timer that
// closes it, only when the handler asks for Done: most never do, and Err
// reads the clock instead.
type attemptCtx struct {
	// Set by newCtx before the handler runs, read only after.
	info     *AttemptInfo
	deadline time.Time

	mu    sync.Mutex    // guards the following
	done  chan struct{} // made by the first Done
	err   error
	timer *time.Timer // closes done at the deadline
}

var _ context.Context = (*attemptCtx)(nil)

// newCtx returns the context of a run of e: the execution's own for the
// first run, a new one for a rerun, since the first run's handler may have
// left goroutines behind that still hold its context.
func (e *execution) newCtx(deadline time.Time) *attemptCtx {
	c := &e.actx
	if c.info != nil {
		c = new(attemptCtx)
	}
	c.info, c.deadline = &e.info, deadline
	return c
}

func (c *attemptCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *attemptCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		c.expireLocked()
		if c.err != nil {
			close(c.done)
		} else {
			c.timer = time.AfterFunc(time.Until(c.deadline), c.expire)
		}
	}
	return c.done
}

func (c *attemptCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked()
	return c.err
}

func (c *attemptCtx) Value(key any) any {
	switch key {
	case attemptKey{}:
		return c.info
	case mdctx.IncomingKey{}:
		if c.info.md != nil {
			return c.info.md
		}
	}
	return nil
}

func (c *attemptCtx) String() string { return "ffgen attempt context" }

// cancel ends the context as a context.WithDeadline's CancelFunc does.
func (c *attemptCtx) cancel() { c.end(context.Canceled) }

func (c *attemptCtx) expire() { c.end(context.DeadlineExceeded) }

func (c *attemptCtx) expireLocked() {
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
}

func (c *attemptCtx) end(err error) {
	c.mu.Lock()
	c.endLocked(err)
	c.mu.Unlock()
}

func (c *attemptCtx) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
}
