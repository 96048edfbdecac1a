package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// A leg is one attempt as its connection sees it: what the connection's
// read goroutine delivers to, by call number, and what the connection's
// alarm (connWatch) watches. The read goroutine records heartbeats in it
// and hands it the final event; the alarm wakes its owner, the goroutine
// that sent the attempt (sent), when its heartbeat deadline passes.
type leg struct {
	// Written only by the owner: before l is in the leg table, or, for
	// conn (moveTo), under l's shard lock. Others read them under that
	// lock, the owner without.
	call             uint64
	conn             transport.Conn
	heartbeatTimeout time.Duration // how long after beat the connection's alarm wakes the owner
	done             chan legEvent // result, redirect or broken connection; reused by the operation's next attempt
	wake             chan struct{} // the heartbeat deadline passed; reused like done

	// Stored by the read goroutine, loaded by the owner and the alarm.
	beat   atomic.Int64           // when the last heartbeat arrived, UnixNano
	acked  atomic.Bool            // a heartbeat or result arrived
	named  atomic.Bool            // the server on conn named the attempt (an ack, a heartbeat item): its heartbeats for all of conn stand for it
	latest atomic.Pointer[[]byte] // last progress reported

	// l's shard lock guards the following. res is written before the
	// event that carries it is sent on done: the owner reads it once it
	// has received the event.
	answered bool                   // res holds the result
	reads    conncap.CallerReadConn // conn, while it counts l among the answers it awaits
	res      resultBox              // the result, copied out of the read buffer

	// watch is the alarm of conn, written by the owner under l's shard
	// lock, like conn.
	watch *connWatch
	// watch.mu guards the following: the alarm relinks l as it fires.
	watchPrev, watchNext *leg  // the other legs in watch's list
	watchNamed           bool  // which of watch's lists holds l: named, or fresh
	alarmed              int64 // the beat whose deadline watch woke the owner for
}

// legEvent is the final event a connection hands an attempt's owner.
type legEvent struct {
	conn     transport.Conn // the connection it came from: a leg that moved on ignores the old one
	result   *frame.Result
	redirect *frame.Redirect
	err      error // the connection broke
}

// outcome is how one attempt ended, as a value its owner returns; the
// operation keeps it as a historyEntry.
type outcome struct {
	member     Member
	number     int
	pos        int    // its place along the order (operation.try)
	redirected bool   // member is a node the attempt was passed on to, not routing's choice
	reason     Reason // ReasonNone: result is the operation's answer (OK or Fail)
	result     *frame.Result
	err        error // the failure, for the history and the caller
	delivery   Delivery
	dur        time.Duration
}

// final reports whether the outcome ends the operation.
func (o *outcome) final() bool { return o.reason == ReasonNone }

// attempt runs one attempt on member until it ends, under the attempt
// interceptors if there are any.
func (op *operation) attempt(ctx context.Context, member Member, number int, flags frame.AttemptFlags) outcome {
	if len(op.c.cfg.AttemptInterceptors) > 0 {
		return op.interceptedAttempt(ctx, member, number, flags, op.lastReason())
	}
	return op.attemptWith(ctx, member, number, flags, op.md)
}

// attemptWith runs one attempt that carries the metadata md.
// An attempt beyond the client's limit to member waits for a slot, for
// an attempt timeout at most (client_limit.go).
func (op *operation) attemptWith(ctx context.Context, member Member, number int, flags frame.AttemptFlags, md []string) outcome {
	c := op.c
	slot, r, err := c.limits.acquire(ctx, member.Name, op.s.AttemptTimeout, op.deadline, op.s.HeartbeatInterval)
	if err != nil {
		return outcome{member: member, number: number, reason: r, err: err} // not sent
	}
	p, o, ok := op.send(ctx, member, number, flags, md, true)
	if ok {
		o = op.await(ctx, p)
	}
	if slot != nil {
		c.limits.release(slot, c.latencyOf(op.m), op.m.Hold, o.reason, o.dur)
	}
	return o
}

// sent is one attempt as the goroutine that makes it sees it, from its
// send to its outcome: the frame, what the connection delivers to (l),
// and what await knows. Only that goroutine touches it, except for l.
type sent struct {
	l     leg
	a     frame.Attempt
	out   outcome // the outcome so far; out.member is the redirect target once redirected
	start time.Time

	// Set by await, which passes its ctx to the methods that need it.
	op         *operation
	attemptEnd time.Time // the attempt timeout, counted from the send
	due        time.Time // when the next check is due: the heartbeat deadline, the attempt's end or a grace's
	timerAt    time.Time // when the timer is set to fire: the attempt's end, or a grace's
	hops       int       // redirects followed
	// ranSomewhere: a node that redirected the attempt may have run it
	// (Redirect.MayHaveRun).
	ranSomewhere bool
	graced       time.Duration // waited so far for frames a late timer may have missed
}

// send sends the attempt, carrying the metadata md, to member, dialing it
// first if dial is set and there is no connection; on failure it returns
// the outcome and false.
// Nothing is sent once the deadline has passed.
func (op *operation) send(ctx context.Context, member Member, number int, flags frame.AttemptFlags, md []string, dial bool) (*sent, outcome, bool) {
	c := op.c
	s := op.s
	p := op.newSent()
	p.start, p.out = time.Now(), outcome{member: member, number: number}
	fail := func(r Reason, err error) (*sent, outcome, bool) {
		p.out.reason, p.out.err, p.out.dur = r, err, time.Since(p.start)
		return nil, p.out, false
	}
	c.cfg.Metrics.AttemptStarted(op.m.Service, op.m.Name)

	// Counted from the attempt's start: one clock reading, not three.
	timeout := min(s.AttemptTimeout, op.deadline.Sub(p.start))
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, dl.Sub(p.start))
	}
	if ctx.Err() != nil {
		return fail(ctxReason(ctx), context.Cause(ctx))
	}
	if timeout <= 0 {
		return fail(ReasonDeadline, fmt.Errorf("no time left to send: %w", context.DeadlineExceeded))
	}
	conn := c.pool.Lookup(member.Addr)
	if conn == nil && !dial {
		return fail(ReasonDialFailed, fmt.Errorf("no connection to %s (%s)", member.Name, member.Addr))
	}
	if conn == nil {
		var err error
		conn, err = op.dial(ctx, member.Addr, false)
		if err != nil {
			if ctx.Err() != nil {
				return fail(ctxReason(ctx), context.Cause(ctx))
			}
			if c.closed.Load() {
				return fail(ReasonClosed, fmt.Errorf("dial %s: %w", member.Name, ErrClientClosed))
			}
			r := dialReason(err)
			if r == ReasonOverloaded {
				return fail(r, op.atLimit(member.Name, err))
			}
			c.unreachable(member.Name, member.Addr, r)
			return fail(r, fmt.Errorf("dial %s (%s): %w", member.Name, member.Addr, err))
		}
	}
	l := &p.l
	l.call = c.nextCall.Add(1)
	l.conn = conn
	l.beat.Store(p.start.UnixNano())
	l.named.Store(false)
	l.heartbeatTimeout = s.HeartbeatTimeout
	c.legs.add(l)

	flags |= frame.FlagAck | frame.FlagAllBeat
	if op.m.Hold {
		flags |= frame.FlagHold
	}
	if op.noRepeat {
		flags |= frame.FlagNoRepeat
	}
	p.a = frame.Attempt{
		Call:      l.call,
		OpID:      op.id,
		Number:    uint32(number),
		Timeout:   timeout,
		Heartbeat: s.HeartbeatInterval,
		Service:   op.m.Service,
		Method:    op.m.Name,
		Entities:  op.entities,
		Flags:     flags,
		History:   op.priors(),
		Progress:  op.progress(),
		Payload:   op.payload,
		Metadata:  md,
	}
	err := conn.Send(&p.a)
	if errors.Is(err, transport.ErrIdle) && dial {
		// The connection closed itself for idleness just now, with
		// nothing in flight: a fresh one is what the next caller would
		// get, so this one gets it too.
		c.pool.Discard(member.Addr, conn)
		conn, err = op.dial(ctx, member.Addr, false)
		if err != nil {
			c.forget(l)
			r := dialReason(err)
			if r == ReasonOverloaded {
				return fail(r, op.atLimit(member.Name, err))
			}
			return fail(r, fmt.Errorf("dial %s (%s): %w", member.Name, member.Addr, err))
		}
		c.legs.moveTo(l, conn)
		err = conn.Send(&p.a)
	}
	if err != nil {
		c.forget(l)
		switch {
		case c.closed.Load():
			return fail(ReasonClosed, fmt.Errorf("send to %s: %w", member.Name, ErrClientClosed))
		case errors.Is(err, transport.ErrQueueFull):
			return fail(ReasonQueueFull, fmt.Errorf("send to %s: %w", member.Name, err))
		case errors.Is(err, transport.ErrFrameTooLarge):
			return fail(ReasonTooLarge, fmt.Errorf("send to %s: %w", member.Name, err))
		}
		return fail(ReasonConnBroken, fmt.Errorf("send to %s: %w", member.Name, err))
	}
	p.out.delivery = Delivered
	return p, outcome{}, true
}

// dialReason names why a dial failed: TLS, a protocol mismatch, the
// node's connection limit, or the connection itself.
func dialReason(err error) Reason {
	switch {
	case errors.Is(err, transport.ErrAtLimit):
		return ReasonOverloaded
	case errors.Is(err, transport.ErrTLS):
		return ReasonTLS
	case errors.Is(err, transport.ErrProtocol):
		return ReasonProtocol
	}
	return ReasonDialFailed
}

// atLimit is the error of an attempt that could not be sent because node
// refused the connection at its connection limit: busy, not gone. The
// hint is a heartbeat interval, about when connections that finished
// their calls may have closed.
func (op *operation) atLimit(node string, err error) error {
	return &OverloadError{Node: node, RetryAfter: op.s.HeartbeatInterval, Detail: err.Error()}
}

// dial gets the pooled connection to addr, dialing if there is none. A
// node that cannot be connected to within a heartbeat timeout is as good
// as one that stopped heartbeating; but one that accepted the connection
// and has not said its Hello yet is busy, not dead (a saturated node is
// slow to run its handshakes), and is waited for until the dial's own
// bound (transport's handshake timeout) or the operation deadline.
//
// A client that was itself descheduled (a busy host, a process running
// a thousand callers) may not even have run the dial's connect by the
// heartbeat timeout: the silence is its own, as for a heartbeat timeout
// whose timer fired late (recheck). A wait that ended late is given back
// the time it was late, again while it keeps ending late, at most a
// heartbeat timeout in all, before the node is blamed; one that ended on
// time is believed at once. retest dials past the pool's backoff.
func (op *operation) dial(ctx context.Context, addr string, retest bool) (transport.Conn, error) {
	due := op.dialDeadline()
	var graced time.Duration
	for {
		conn, timedOut, err := op.getConn(ctx, addr, due, retest)
		if errors.Is(err, transport.ErrHelloLate) && ctx.Err() == nil {
			conn, _, err = op.getConn(ctx, addr, op.deadline, retest)
			return conn, err
		}
		if !timedOut || ctx.Err() != nil || !due.Before(op.deadline) {
			return conn, err
		}
		g := starvedGrace(time.Since(due), op.s.HeartbeatTimeout-graced)
		if g == 0 {
			return conn, err
		}
		graced += g
		if due = time.Now().Add(g); op.deadline.Before(due) {
			due = op.deadline
		}
	}
}

// getConn gets the pooled connection to addr, waiting until due at most,
// and reports whether the wait ended there. retest dials past the pool's
// backoff (Client.redirectVouches).
func (op *operation) getConn(ctx context.Context, addr string, due time.Time, retest bool) (conn transport.Conn, timedOut bool, err error) {
	dctx, cancel := context.WithDeadline(ctx, due)
	defer cancel()
	if retest {
		conn, err = op.c.pool.Redial(dctx, addr, op.s.HeartbeatTimeout)
	} else {
		conn, err = op.c.pool.Get(dctx, addr)
	}
	return conn, err != nil && dctx.Err() != nil && ctx.Err() == nil, err
}

// dialDeadline bounds a dial by a heartbeat timeout and the operation deadline.
func (op *operation) dialDeadline() time.Time {
	dl := time.Now().Add(op.s.HeartbeatTimeout)
	if op.deadline.Before(dl) {
		return op.deadline
	}
	return dl
}

func (c *Client) forget(l *leg) { c.legs.remove(l) }

// await watches a sent attempt until it is answered, times out, breaks or
// ctx ends. Its timer watches the attempt timeout, armed once, and a
// re-check's grace; the connection's alarm wakes it when the heartbeat
// deadline passes. p.due is when the next of the two is due, as one timer
// for both would be set: the grace of a late wake is measured from it.
func (op *operation) await(ctx context.Context, p *sent) outcome {
	p.op, p.attemptEnd = op, p.start.Add(p.a.Timeout)
	defer op.c.forget(&p.l)
	p.due = p.start.Add(min(op.s.HeartbeatTimeout, p.a.Timeout))
	p.timerAt = p.attemptEnd
	// The timer is armed when the caller first waits on the channels: an
	// answer the caller read itself needs none, and arming and stopping
	// it took the runtime's timer locks on every call.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if rc, ok := p.l.conn.(conncap.CallerReadConn); ok {
			// Read the answer here if nobody else reads: no goroutine
			// then has to be woken to hand it over.
			if rc.ReadFor(ctx, p, p.due) && !p.Ready() && p.moved(time.Now()) {
				continue
			}
		}
		if p.Ready() {
			// What the connection delivered is here: no wait, and no
			// select over the four channels. Only this goroutine receives
			// from done, so the receive does not block.
			if ev := <-p.l.done; !p.orphaned(ev) {
				if o, ended := p.event(ctx, ev); ended {
					return o
				}
			}
			continue
		}
		if timer == nil {
			timer = op.attemptTimer(time.Until(p.attemptEnd))
		}
		select {
		case ev := <-p.l.done:
			if p.orphaned(ev) {
				continue
			}
			if o, ended := p.event(ctx, ev); ended {
				return o
			}
		case <-p.l.wake:
			if p.timerAt != p.attemptEnd {
				continue // in a grace: the timer decides
			}
			now := time.Now()
			if be := time.Unix(0, p.l.beatDeadline(p.l.watch)); be.Before(p.attemptEnd) {
				p.due = be
			}
			if o, ended := p.expired(ctx, timer, now); ended {
				return o
			}
		case <-timer.C:
			if o, ended := p.expired(ctx, timer, time.Now()); ended {
				return o
			}
		case <-ctx.Done():
			return p.end(ctxReason(ctx), context.Cause(ctx))
		}
	}
}

// moved reports, after reading up to p.due at now found no answer,
// whether a heartbeat moved the deadline on: then p.due is the new one,
// and the caller reads on until it.
func (p *sent) moved(now time.Time) bool {
	if p.Ready() || now.Before(p.due) || p.timerAt != p.attemptEnd {
		return false
	}
	be := time.Unix(0, p.l.beatDeadline(p.l.watch))
	if !now.Before(be) || !now.Before(p.attemptEnd) {
		return false // the alarm or the timer is due
	}
	p.due = be
	if p.attemptEnd.Before(be) {
		p.due = p.attemptEnd
	}
	return true
}

// Ready reports whether the attempt's connection has handed it an event.
func (p *sent) Ready() bool { return len(p.l.done) > 0 }

// end ends the attempt for r (ReasonNone: its answer is the outcome).
func (p *sent) end(r Reason, err error) outcome {
	l, out := &p.l, p.out
	out.reason, out.err, out.dur = r, err, time.Since(p.start)
	if l.acked.Load() {
		out.delivery = Acknowledged
	}
	if pr := l.latest.Load(); pr != nil {
		p.op.setProgress(*pr)
	}
	// A replicated write is never cancelled: once sent, it may be
	// sequenced, and then it runs on every replica.
	if r != ReasonNone && r != ReasonFailoverError && r != ReasonPanic && r != ReasonRefused && r != ReasonOverloaded && p.a.Flags&frame.FlagScatter == 0 {
		l.conn.Send(&frame.Cancel{Call: l.call}) // best effort
	}
	return out
}

// orphaned reports whether ev comes from a connection that a redirect left
// behind: the copy of the attempt there is no longer watched, and its
// answer or its connection's end says nothing about this attempt.
func (p *sent) orphaned(ev legEvent) bool { return ev.conn != p.l.conn }

// event handles what the connection delivered: a result, a redirect, or
// its end.
func (p *sent) event(ctx context.Context, ev legEvent) (outcome, bool) {
	c, name := p.op.c, p.out.member.Name
	switch {
	case ev.result != nil:
		p.out.result = ev.result
		if ev.result.Status == frame.StatusFailover && ev.result.Code == codeNotStarted {
			// The node gave up on the attempt, still queued, as its time
			// ended (or it halted first): it ends as it would have at
			// its time, and the node ran nothing of it.
			r, err := p.op.timeUp(ctx, later(time.Now(), p.attemptEnd), name, p.a.Timeout)
			o := p.end(r, fmt.Errorf("%w (%s: %s)", err, name, ev.result.Message))
			o.delivery = Refused
			return p.ranBefore(o), true
		}
		if stoppedInTime(ev.result) {
			if now := time.Now(); !now.Before(p.attemptEnd) {
				// The server's own timer stopped the handler: the same
				// moment as ours, so the attempt ends as our timer would
				// have ended it, whichever fired first.
				r, err := p.op.timeUp(ctx, now, name, p.a.Timeout)
				return p.end(r, err), true
			}
		}
		c.alive(name)
		return p.ranBefore(p.op.judge(p.end, ev.result, name)), true
	case ev.redirect != nil:
		return p.followRedirect(ctx, ev.redirect)
	case c.closed.Load():
		return p.end(ReasonClosed, fmt.Errorf("connection to %s closed: %w", name, ErrClientClosed)), true
	}
	c.unreachable(name, p.out.member.Addr, ReasonConnBroken)
	return p.end(ReasonConnBroken, fmt.Errorf("connection to %s broke: %w", name, ev.err)), true
}

// followRedirect follows a handler that passed the attempt on: the same
// attempt goes to the new node, whose heartbeats are watched from now on.
func (p *sent) followRedirect(ctx context.Context, rd *frame.Redirect) (outcome, bool) {
	c, l := p.op.c, &p.l
	p.hops++
	p.ranSomewhere = p.ranSomewhere || rd.MayHaveRun
	if p.hops > maxRedirects {
		return p.end(ReasonFailoverError, fmt.Errorf("more than %d redirects", maxRedirects)), true
	}
	// From here the attempt is the target's: a failure to reach it is
	// recorded against it, so that the next attempt tells its node that
	// the target failed (a follower then stands for election instead of
	// redirecting to a leader that is gone).
	p.out.member = Member{Name: rd.Node, Addr: rd.Addr, Group: p.out.member.Group}
	var retest *probing
	if c.nsuspect.Load() > 0 && c.suspected(rd.Node) {
		var vouch bool
		if vouch, retest = c.redirectVouches(rd.Node, p.op.s.HeartbeatTimeout); !vouch && retest == nil {
			// A node this client just saw fail (a leader another node
			// still believes in): the next attempt's node hears that it
			// failed.
			return p.unsent(rd, p.end(ReasonSuspected, fmt.Errorf("redirected to %s, which is suspected", rd.Node))), true
		}
	}
	nc, err := p.op.dial(ctx, rd.Addr, retest != nil)
	if err == nil && retest != nil {
		c.reached(rd.Node, retest, false)
	}
	if err != nil {
		r := dialReason(err)
		if r == ReasonOverloaded {
			return p.unsent(rd, p.end(r, p.op.atLimit(rd.Node, err))), true
		}
		c.unreachable(rd.Node, rd.Addr, r)
		return p.unsent(rd, p.end(r, fmt.Errorf("dial redirect target %s: %w", rd.Node, err))), true
	}
	c.legs.moveTo(l, nc)
	p.a.Flags &^= frame.FlagNoRepeat // the next group's owner may be this node
	if err := nc.Send(&p.a); err != nil {
		return p.end(ReasonConnBroken, fmt.Errorf("send to %s: %w", rd.Node, err)), true
	}
	l.beat.Store(time.Now().UnixNano())
	return outcome{}, false
}

// ranBefore keeps o, which the attempt's node answered without running
// it (a refusal for overload, say), from saying that nothing ran when a
// node that redirected the attempt here may have run it: a leader that
// proposed a replicated write and lost its leadership, whose write may
// still commit.
func (p *sent) ranBefore(o outcome) outcome {
	if p.ranSomewhere && o.delivery == Refused {
		o.delivery = Delivered
	}
	return o
}

// unsent marks o, an attempt that never reached its redirect target, as
// refused when no node that redirected it may have run it: nothing ran
// anywhere.
func (p *sent) unsent(rd *frame.Redirect, o outcome) outcome {
	if !p.ranSomewhere {
		o.delivery = Refused
	}
	return o
}

// expired handles the timer or the alarm at now: the attempt's time is
// up, or the heartbeat's, or a heartbeat moved the deadline on.
func (p *sent) expired(ctx context.Context, timer *time.Timer, now time.Time) (outcome, bool) {
	s, l := p.op.s, &p.l
	beatEnd := time.Unix(0, l.beatDeadline(l.watch))
	switch {
	case !now.Before(p.attemptEnd):
		r, err := p.op.timeUp(ctx, now, p.out.member.Name, p.a.Timeout)
		return p.end(r, err), true
	case !now.Before(beatEnd):
		if g := p.recheck(now); g > 0 {
			p.due = now.Add(g)
			p.arm(timer, now, p.due)
			return outcome{}, false
		}
		p.op.c.suspect(p.out.member.Name, ReasonHeartbeatTimeout)
		return p.end(ReasonHeartbeatTimeout, fmt.Errorf("no heartbeat from %s within %s: %w", p.out.member.Name, s.HeartbeatTimeout, context.DeadlineExceeded)), true
	}
	p.due = p.attemptEnd
	if beatEnd.Before(p.due) {
		p.due = beatEnd
		l.rewatch()
	}
	p.arm(timer, now, p.attemptEnd)
	return outcome{}, false
}

// arm sets the timer to fire at at, unless it already does.
func (p *sent) arm(timer *time.Timer, now, at time.Time) {
	if p.timerAt.Equal(at) {
		return
	}
	p.timerAt = at
	timer.Reset(at.Sub(now))
}

// starvedAfter is how late a timer may fire before the client counts
// itself starved: a timer that fires this much after it was due shows
// that this process was not running, and neither was the goroutine that
// reads the connection.
const starvedAfter = time.Millisecond

// recheck returns how long to wait before a heartbeat timeout is believed,
// zero to believe it now. A client whose timer fired late was itself
// descheduled (a busy host, a stop of the process): the heartbeats the
// node sent meanwhile may be in the socket, unread, and the silence is its
// own. It gives the node back the time it took from it: it waits as long
// as it was late for the connection to deliver them, again while it keeps
// firing late, at most a heartbeat timeout in all. A frame that arrives
// meanwhile moves the heartbeat deadline and clears the timeout; without
// one, the node is blamed. A node that really stopped costs a client that
// is not starved nothing.
//
// The timer may fire on time while the goroutine that reads the
// connection waits for a core behind the process's other goroutines (a
// thousand callers sharing one client): then the node's heartbeat is in
// the socket, and the connection says so (conncap.UnreadConn). The reader
// is waited for too, a quarter of a heartbeat timeout at a time, within
// the same bound. A node that stopped sends nothing, and nothing waits
// unread.
func (p *sent) recheck(now time.Time) time.Duration {
	left := p.op.s.HeartbeatTimeout - p.graced
	g := starvedGrace(now.Sub(p.due), left)
	if g == 0 && left > 0 {
		if uc, ok := p.l.conn.(conncap.UnreadConn); ok && uc.Unread() > 0 {
			g = min(p.op.s.HeartbeatTimeout/4, left)
		}
	}
	p.graced += g
	return g
}

// starvedGrace is how long to wait on for a node after a wait that ended
// late by late: as long as it was late, within left, the grace not yet
// given; zero when it ended on time (within starvedAfter).
func starvedGrace(late, left time.Duration) time.Duration {
	if late < starvedAfter || left <= 0 {
		return 0
	}
	return min(late, left)
}

const maxRedirects = 4

// timeUp names how an attempt whose time ran out at now ends: the operation
// deadline and the caller's context are nobody's fault; only an attempt
// timeout of its own makes the node suspect.
func (op *operation) timeUp(ctx context.Context, now time.Time, node string, timeout time.Duration) (Reason, error) {
	if !now.Before(op.deadline) {
		return ReasonDeadline, fmt.Errorf("operation timeout %s passed: %w", op.s.OperationTimeout, context.DeadlineExceeded)
	}
	// The caller's deadline may have set the attempt's end, its context's
	// timer firing at the same instant as ours.
	if r, err := callerEnded(ctx); err != nil {
		return r, err
	}
	op.c.suspect(node, ReasonAttemptTimeout)
	return ReasonAttemptTimeout, fmt.Errorf("attempt on %s took longer than %s: %w", node, timeout, context.DeadlineExceeded)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stoppedInTime reports whether r is a server's answer that the attempt's
// time ran out there (or it was cancelled before it ran).
func stoppedInTime(r *frame.Result) bool {
	return r.Status == frame.StatusFailover && r.Code == codeTimeout
}

// ctxReason tells a cancelled context (a hedge loser, a caller that gave
// up) from one whose deadline passed.
func ctxReason(ctx context.Context) Reason {
	if errors.Is(ctx.Err(), context.Canceled) {
		return ReasonCancelled
	}
	return ReasonDeadline
}

// judge turns a Result into an outcome.
func (op *operation) judge(end func(Reason, error) outcome, r *frame.Result, node string) outcome {
	switch r.Status {
	case frame.StatusOK:
		return end(ReasonNone, nil)
	case frame.StatusFail:
		o := end(ReasonNone, op.remoteErr(r, node))
		if r.Code == codeBadArgs || r.Code == codeVotersCannotApply {
			o.delivery = Refused // the handler did not run
		}
		return o
	}
	if r.Code == codePanic {
		return end(ReasonPanic, op.remoteErr(r, node))
	}
	if r.Code == codeOverloaded {
		o := end(ReasonOverloaded, overloadError(r, node))
		o.delivery = Refused
		return o
	}
	if refusedCode(r.Code) {
		o := end(ReasonRefused, op.remoteErr(r, node))
		o.delivery = Refused
		return o
	}
	return end(ReasonFailoverError, op.remoteErr(r, node))
}

// remoteErr rebuilds the error a Result carries: the declared error for a
// known code, a *RemoteError otherwise.
func (op *operation) remoteErr(r *frame.Result, node string) error {
	if r.Code != "" {
		for i := range op.m.Errors {
			rule := &op.m.Errors[i]
			if rule.Code == r.Code && rule.Decode != nil {
				return rule.Decode(r.Message, r.Payload)
			}
		}
	}
	return &RemoteError{Node: node, Service: op.m.Service, Method: op.m.Name, Code: r.Code, Message: r.Message}
}
