package runtime

import (
	"sync"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"
)

// Operations are recycled, with what each attempt needs (the attempt's
// record and its channels, the timer, the argument buffer), so a call
// allocates none of them. Hedged operations are not: their attempts run
// on goroutines of their own that may outlive Invoke. The pool is the
// client's own, not the process's: its channels and timers then belong to
// the client's testing/synctest bubble, if it has one.
type opPool struct{ p sync.Pool }

// maxPooledPayload bounds the argument buffer a recycled operation keeps.
const maxPooledPayload = 64 << 10

func (c *Client) newOperation(m *MethodDesc, s Settings, reply codec.Message, start time.Time) *operation {
	var op *operation
	if m.Mode == ModeHedge {
		op = new(operation)
	} else {
		op, _ = c.ops.p.Get().(*operation)
		if op == nil {
			op = new(operation)
		}
	}
	op.c, op.m, op.s, op.reply, op.start = c, m, s, reply, start
	return op
}

// release recycles op once Invoke is done with it: no leg of it is in the
// client's table any more, and the caller holds only values copied out.
func (op *operation) release() {
	if op.m.Mode == ModeHedge {
		return
	}
	payload, timer, done, wake := op.payload[:0], op.timer, op.sentBuf.l.done, op.sentBuf.l.wake
	if cap(payload) > maxPooledPayload {
		payload = nil
	}
	c := op.c
	*op = operation{c: c, payload: payload, timer: timer}
	op.sentBuf.l.done, op.sentBuf.l.wake = done, wake
	op.c.ops.p.Put(op)
}

// newSent returns the record of a new attempt. One-at-a-time modes reuse
// the operation's own: the previous attempt has been forgotten, so nothing
// is delivered to it any more, and an event that came too late for it is
// drained. Hedged attempts run side by side and get their own.
func (op *operation) newSent() *sent {
	if op.m.Mode == ModeHedge {
		return &sent{l: leg{done: make(chan legEvent, 1), wake: make(chan struct{}, 1)}}
	}
	done, wake := op.sentBuf.l.done, op.sentBuf.l.wake
	if done == nil {
		done, wake = make(chan legEvent, 1), make(chan struct{}, 1)
	}
	select {
	case <-done:
	default:
	}
	select {
	case <-wake:
	default:
	}
	op.sentBuf = sent{}
	op.sentBuf.l.done, op.sentBuf.l.wake = done, wake
	return &op.sentBuf
}

// attemptTimer returns a timer set to fire after d: the operation's own in
// one-at-a-time modes (stopped timers deliver nothing stale since Go 1.23),
// a new one for each hedged attempt.
func (op *operation) attemptTimer(d time.Duration) *time.Timer {
	if op.m.Mode == ModeHedge {
		return time.NewTimer(d)
	}
	if op.timer == nil {
		op.timer = time.NewTimer(d)
	} else {
		op.timer.Reset(d)
	}
	return op.timer
}
