package runtime

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/codec"
)

// execution is one operation on this server, shared by every attempt of it
// that arrives while it is queued or running (each attempt is a waiter).
type execution struct {
	// Set when e is made, before another goroutine can reach it, and read
	// only after.
	s        *Server
	method   *MethodDesc
	sm       *servedMethod // how long its handler runs (to run quick ones inline), and its counts
	impl     any
	args     codec.Message
	info     AttemptInfo // embedded: one allocation fewer per attempt
	entities []string
	payload  []byte // the encoded arguments, kept for replication
	entBuf   [2]string
	// hold and scatter share their word with remember: an execution is
	// allocated on every call, and a word more takes it to the next size
	// class.
	hold    bool
	scatter bool

	// remember: an attempt may ask for the result again, so the result
	// goes to the result cache. Set when the execution is made, or later by
	// an attempt that joins it while its handler runs: atomic, since the
	// handler's goroutine reads it without the server's lock.
	remember atomic.Bool
	progress progressCell // its own lock: the handler writes, the ticker reads

	// Owned by the goroutine that runs the handler: one at a time, since a
	// rerun starts only once the run before it has ended. res is the
	// result it answers with; an execution that ends without running
	// answers with a result of its own (expire), so res has no other
	// writer.
	res    frame.Result
	actx   attemptCtx // the first run's context (newCtx)
	resBuf [64]byte   // the encoded result, when it is not remembered

	// s.mu guards the following. The handler's goroutine reads arrived,
	// timeout and apply without it as it runs: they are written before
	// the run starts, and not while it runs.
	state    execState // changed only by fire (server_execstate.go)
	waitsIn  bool      // counted in s.waiting (track)
	waiters  []waiter
	waitBuf  [1]waiter
	deadline time.Time   // heartbeats stop here, even if the handler does not
	ctx      *attemptCtx // the handler's, once it runs: cancelled to stop it
	arrived  time.Time   // the attempt's time counts from here; a rerun restarts it
	timeout  time.Duration
	apply    *applying // set while a committed replicated write runs
	// queues[i] is entities[i]'s queue while e is queued in them (set by
	// schedule, dropped by release): on a server with thousands of
	// entities busy, each lookup in the server's map is a cache miss.
	queues   []*entityQueue
	queueBuf [2]*entityQueue
}

type waiter struct {
	conn     *serverConn
	call     uint64
	progress uint64 // progress version last sent to this waiter
	// all: the client counts a heartbeat for the whole connection as one
	// for this call (frame.FlagAllBeat), which it has an ack for.
	all bool
}

// expires is when the attempt's time ends, counted from its arrival as the
// client counts it: a queued attempt expires then, and no handler
// deadline comes earlier.
func (e *execution) expires() time.Time { return e.arrived.Add(e.timeout) }

func (e *execution) setProgress(p []byte) {
	e.progress.set(p)
	e.s.progressed.Add(1) // after the set: a tick that sees the count sees the progress
}

// addWaiter makes attempt a, which arrived on sc, a waiter of e: its
// heartbeats start, and the client hears that it arrived. Called with s.mu
// held.
func (e *execution) addWaiter(sc *serverConn, a *frame.Attempt) {
	if e.waiters == nil {
		e.waiters = e.waitBuf[:0]
	}
	const allBeat = frame.FlagAck | frame.FlagAllBeat
	w := waiter{conn: sc, call: a.Call, all: a.Flags&allBeat == allBeat}
	e.waiters = append(e.waiters, w)
	sc.calls[a.Call] = e
	sc.startHeartbeats(e.s.clampInterval(a.Heartbeat))
	sc.joined(e, w) // after the interval is known: its shortcut depends on it
	sc.acknowledge(a)
}

// removeWaiter is called with s.mu held.
func (e *execution) removeWaiter(sc *serverConn, call uint64) {
	if i := e.waiterAt(sc, call); i >= 0 {
		e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
	}
	sc.forget(call)
}

// waiterAt is the index of e's waiter for call on sc, -1 if it has none.
// Called with s.mu held.
func (e *execution) waiterAt(sc *serverConn, call uint64) int {
	for i, w := range e.waiters {
		if w.conn == sc && w.call == call {
			return i
		}
	}
	return -1
}

// run runs the handler of a started execution, on its own goroutine.
func (e *execution) run() {
	s := e.s
	defer s.running.Done()
	// The parent is Background, not a server-wide context: Shutdown and
	// Close cancel executions one by one, which spares every attempt a
	// registration in a shared parent.
	// The attempt's time counts from its arrival, as the client's does:
	// time spent queued behind the entity's other operations is included.
	// A scatter copy is the exception: every node must apply it, however
	// long it queued, so its time starts when it runs.
	deadline := e.expires()
	if e.scatter {
		deadline = time.Now().Add(e.timeout)
	}
	ctx := e.newCtx(deadline)
	defer ctx.cancel()
	s.mu.Lock()
	e.ctx = ctx
	e.deadline = deadline
	// A cancel or a halt between its start and now found no context to
	// end: the handler does not run at all.
	started := e.state == stateRunning
	s.mu.Unlock()

	r := &e.res
	if !started {
		*r = notStarted("attempt cancelled or expired before it ran")
		s.countRefusal(e.sm, e.method.Service, e.method.Name, r.Code)
		e.endRun(evStopped, r, nil)
		return
	}
	m, sm := e.method, e.sm
	sm.served.Running.Add(1)
	s.cfg.Metrics.ServerAttempt(m.Service, m.Name, 1)
	began := time.Now()
	res, err := e.call(ctx)
	ran := time.Since(began)
	sm.pace.observe(ran)
	sm.served.Running.Add(-1)
	s.cfg.Metrics.ServerAttempt(m.Service, m.Name, -1)
	switch fwd := asForward(err); {
	case fwd != nil:
		if rd, ok := e.resolveForward(fwd); ok {
			s.handled(sm, "forwarded", "", ran)
			e.endRun(evReturned, nil, rd)
			return
		}
		err = fmt.Errorf("forward to %s: node unknown", fwd.Node)
		*r = frame.Result{Status: frame.StatusFailover, Message: err.Error()}
		e.handled(r, ran)
	case err != nil && ctx.Err() != nil:
		// The engine ended the handler (a cancel, the attempt
		// timeout, a shutdown): its error says nothing about the
		// operation, so the answer is Failover, and not remembered.
		// Counted before endRun: a rerun it starts owns e.res.
		s.handled(sm, "failover", codeTimeout, ran)
		*r = frame.Result{Status: frame.StatusFailover, Code: codeTimeout, Message: "handler stopped: " + err.Error()}
		e.endRun(evStopped, r, nil)
		return
	default:
		*r = e.safeResult(res, err)
		e.handled(r, ran)
	}
	e.endRun(evReturned, r, nil)
}

// handled reports a handler run that ended with r to the metrics.
func (e *execution) handled(r *frame.Result, ran time.Duration) {
	code := r.Code
	if code == "" && r.Status != frame.StatusOK {
		code = "undeclared"
	}
	e.s.handled(e.sm, r.Status.String(), code, ran)
}

// asForward finds a ForwardError in err. The variable errors.As needs is
// declared only on the rare path, so the common one does not allocate it.
func asForward(err error) *ForwardError {
	if err == nil {
		return nil
	}
	if fwd, ok := err.(*ForwardError); ok {
		return fwd
	}
	var fwd *ForwardError
	if errors.As(err, &fwd) {
		return fwd
	}
	return nil
}

// resolveForward finds the address of the node a handler forwarded to.
func (e *execution) resolveForward(fwd *ForwardError) (*frame.Redirect, bool) {
	if e.s.cfg.Membership == nil {
		return nil, false
	}
	for _, m := range e.s.cfg.Membership.Members() {
		if m.Name == fwd.Node {
			// The handler ran before it passed the attempt on.
			return &frame.Redirect{Node: m.Name, Addr: m.Addr, MayHaveRun: true}, true
		}
	}
	return nil, false
}

// call runs the handler, turning a panic into an error.
func (e *execution) call(ctx context.Context) (res codec.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			e.s.cfg.Logger.Error("ffgen: handler panicked; answering failover",
				"service", e.method.Service, "method", e.method.Name, "op", e.info.OpIDString(),
				"panic", v, "stack", string(debug.Stack()))
			res, err = nil, &panicError{value: v}
		}
	}()
	return e.handle(ctx)
}

type panicError struct{ value any }

func (p *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.value) }

// safeResult is result with user code (error matchers, encoders) behind a
// recover: a panic there must not take the node down either.
func (e *execution) safeResult(res codec.Message, err error) (r frame.Result) {
	defer func() {
		if v := recover(); v != nil {
			e.s.cfg.Logger.Error("ffgen: mapping a handler's result panicked; answering failover",
				"service", e.method.Service, "method", e.method.Name, "op", e.info.OpIDString(),
				"panic", v, "stack", string(debug.Stack()))
			r = frame.Result{Status: frame.StatusFailover, Code: codePanic, Message: fmt.Sprintf("result mapping panicked: %v", v)}
		}
	}()
	return e.result(res, err)
}

// result maps the handler's outcome to a Result frame.
func (e *execution) result(res codec.Message, err error) frame.Result {
	m := e.method
	if err == nil {
		payload, cerr := e.s.cfg.Codec.Append(e.resultBuf(), res)
		if cerr != nil {
			return frame.Result{Status: frame.StatusFail, Code: codeBadResult, Message: "encode result: " + cerr.Error()}
		}
		return frame.Result{Status: frame.StatusOK, Payload: payload}
	}
	var pe *panicError
	if errors.As(err, &pe) {
		return frame.Result{Status: frame.StatusFailover, Code: codePanic, Message: err.Error()}
	}
	for i := range m.Errors {
		rule := &m.Errors[i]
		if rule.Match(err) {
			r := frame.Result{Status: statusOf(rule.Directive), Code: rule.Code, Message: err.Error()}
			if rule.Encode != nil {
				r.Payload = rule.Encode(err)
			}
			return r
		}
	}
	return frame.Result{Status: statusOf(m.Default), Message: err.Error()}
}

func statusOf(d Directive) frame.Status {
	if d == Failover {
		return frame.StatusFailover
	}
	return frame.StatusFail
}

// endRun ends a run with ev (evStopped or evReturned): the execution runs
// again if it is to be rerun, or else its waiters get r or rd.
func (e *execution) endRun(ev execEvent, r *frame.Result, rd *frame.Redirect) {
	s := e.s
	if e.apply != nil && rd != nil {
		e.res = frame.Result{Status: frame.StatusFail, Code: codeBadResult, Message: forwardedWrite}
		r, rd = &e.res, nil
	}
	s.mu.Lock()
	if e.fire(ev) == stateRunning {
		// An attempt joined after the cancel and wants it done: it runs
		// again, still heading its queues, with its time from now.
		e.arrived = time.Now()
		s.running.Add(1)
		s.start(e)
		s.mu.Unlock()
		return
	}
	waiters := e.end(r, rd)
	s.mu.Unlock()
	answerWaiters(waiters, r, rd)
}

// end takes e, which reached a final state, off the server: it remembers a
// completed outcome, tells the replicated log, lets its entities' next
// operations run, and returns the waiters to answer with r or rd (at most
// one is set: a forwarded attempt gets a Redirect and is not remembered,
// since it did not execute here). Called with s.mu held.
func (e *execution) end(r *frame.Result, rd *frame.Redirect) []waiter {
	s := e.s
	waiters := e.waiters
	e.waiters = nil
	for _, w := range waiters {
		w.conn.forget(w.call)
	}
	if s.execs[e.info.OpID] == e {
		delete(s.execs, e.info.OpID)
	}
	if e.apply != nil {
		e.apply.report(r)
		e.apply = nil
	}
	// Only completed outcomes are remembered: a Failover answer means the
	// handler declined, so a later attempt of the operation may run here.
	// A replicated write's outcome is the replica's record already
	// (replica.Group.Recorded answers its retries, on every node and
	// after a restart): the cache would hold a second copy.
	if r != nil && r.Status != frame.StatusFailover && e.remember.Load() && !e.scatter {
		s.results.put(e.info.OpID, *r, time.Now())
	}
	s.release(e)
	return waiters
}

// answerWaiters sends waiters r, or rd. The sends are queued, never
// blocking, so it may be called with s.mu held.
func answerWaiters(waiters []waiter, r *frame.Result, rd *frame.Redirect) {
	for _, w := range waiters {
		s := w.conn.s
		if rd != nil {
			rd.Call = w.call
			s.send(w.conn.conn, rd)
			continue
		}
		if r != nil {
			r.Call = w.call
			s.send(w.conn.conn, r)
		}
	}
}
