package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/codec"
)

// Invoker runs one operation: the rest of the interceptor chain, then the
// engine. Client.Invoke has this shape.
type Invoker func(ctx context.Context, m *MethodDesc, args, reply codec.Message) error

// OperationInterceptor wraps every operation of a client, failovers
// included: it runs once per Invoke, sees the arguments and the outcome,
// and may change the context (add metadata, set the operation ID or a
// timeout) before it calls next, or not call it at all.
type OperationInterceptor func(ctx context.Context, m *MethodDesc, args, reply codec.Message, next Invoker) error

// ClientAttempt is one attempt of an operation as an AttemptInterceptor
// sees it.
type ClientAttempt struct {
	Method *MethodDesc
	OpID   [16]byte
	Number int    // 0 for the first attempt
	Node   string // the node it goes to
	Group  string // the node's failure group
	// After is why the previous attempt ended, the reason this one is
	// made: ReasonNone for the first, and for a hedged attempt started by
	// the hedge delay while the previous one still runs.
	After  Reason
	Hedged bool // one of a hedged method's concurrent attempts
}

// AttemptResult is how an attempt ended.
type AttemptResult struct {
	// Reason is ReasonNone when the attempt produced the operation's
	// answer (Err is then nil or the declared error the server returned);
	// otherwise the reason the operation moves on or stops.
	Reason Reason
	Err    error
	// Duration is how long the attempt took, dial included.
	Duration time.Duration
}

// AttemptInterceptor wraps every attempt: it runs when the attempt's node is
// chosen, before it is dialed and sent. The context it passes to next is the
// attempt's: metadata added to it goes with this attempt only. It returns
// next's result; one that does not call next ends the operation with the
// Err it returns (an error saying so if Err is nil), without sending.
type AttemptInterceptor func(ctx context.Context, a *ClientAttempt, next func(context.Context) AttemptResult) AttemptResult

// Handler runs a method's handler on a server: the rest of the interceptor
// chain, then the user's method.
type Handler func(ctx context.Context, args codec.Message) (codec.Message, error)

// ServerInterceptor wraps every handler run on a server. ctx carries the
// attempt (AttemptFrom) and the call's metadata
// (metadata.FromIncomingContext); m is the method. It may refuse the call
// by returning an error without calling next: the error is mapped like the
// handler's own (declared errors, then the method's default directive).
type ServerInterceptor func(ctx context.Context, m *MethodDesc, args codec.Message, next Handler) (codec.Message, error)

// errNotSent ends an operation whose attempt interceptor neither sent the
// attempt nor said why.
var errNotSent = errors.New("ffgen: an attempt interceptor did not send the attempt")

// intercepted runs Invoke's engine under the operation interceptors, the
// first outermost.
func (c *Client) intercepted(ctx context.Context, m *MethodDesc, args, reply codec.Message) error {
	ics := c.cfg.Interceptors
	var next func(i int) Invoker
	next = func(i int) Invoker {
		if i == len(ics) {
			return c.invoke
		}
		return func(ctx context.Context, m *MethodDesc, args, reply codec.Message) error {
			return ics[i](ctx, m, args, reply, next(i+1))
		}
	}
	return next(0)(ctx, m, args, reply)
}

// interceptedAttempt runs one attempt under the attempt interceptors. The
// context the innermost one passes on is the attempt's; its metadata is
// sent if it differs from the operation's.
func (op *operation) interceptedAttempt(ctx context.Context, member Member, number int, flags frame.AttemptFlags, after Reason) outcome {
	ics := op.c.cfg.AttemptInterceptors
	ca := &ClientAttempt{Method: op.m, OpID: op.id, Number: number, Node: member.Name, Group: member.Group,
		After: after, Hedged: flags&frame.FlagHedge != 0}
	var o outcome
	sent := false
	var next func(i int) func(context.Context) AttemptResult
	next = func(i int) func(context.Context) AttemptResult {
		if i == len(ics) {
			return func(actx context.Context) AttemptResult {
				md, err := outgoingPairs(actx)
				if err != nil {
					o = outcome{member: Member{Group: member.Group}, number: number, err: err}
					return AttemptResult{Err: err}
				}
				sent = true
				o = op.attemptWith(actx, member, number, flags, md)
				return AttemptResult{Reason: o.reason, Err: o.err, Duration: o.dur}
			}
		}
		return func(actx context.Context) AttemptResult {
			return ics[i](actx, ca, next(i+1))
		}
	}
	res := next(0)(ctx)
	if !sent && o.err == nil {
		// Refused before sending: a final outcome, so no other node is
		// tried for what the interceptor decided. The node stays out of
		// the record: nothing was started on it.
		o = outcome{member: Member{Group: member.Group}, number: number, err: res.Err}
		if o.err == nil {
			o.err = errNotSent
		}
	}
	return o
}

// handle runs the method's handler under the server interceptors, the
// first outermost.
func (e *execution) handle(ctx context.Context) (codec.Message, error) {
	ics := e.s.cfg.Interceptors
	if len(ics) == 0 {
		return e.method.Handle(ctx, e.impl, e.args)
	}
	var next func(i int) Handler
	next = func(i int) Handler {
		if i == len(ics) {
			return func(ctx context.Context, args codec.Message) (codec.Message, error) {
				return e.method.Handle(ctx, e.impl, args)
			}
		}
		return func(ctx context.Context, args codec.Message) (codec.Message, error) {
			return ics[i](ctx, e.method, args, next(i+1))
		}
	}
	return next(0)(ctx, e.args)
}
