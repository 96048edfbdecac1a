package runtime

// Per-call options. Generated methods keep the interface's signature, so
// what one call asks for beyond its arguments travels in its context.

import (
	"context"
	"time"
)

type opTimeoutKey struct{}

// WithOperationTimeout returns a context under which Client.Invoke gives
// each operation d in place of its method's operation timeout, longer or
// shorter. Generated methods keep the interface's signature, so per-call
// options travel in the context, as WithOperationID does. Attempts keep
// their own timeout, capped by what is left of the operation. A context
// deadline still ends the call sooner; d must be positive, or the call
// fails before anything is sent.
func WithOperationTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, opTimeoutKey{}, d)
}

// operationTimeout returns the timeout set by WithOperationTimeout, if any.
func operationTimeout(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(opTimeoutKey{}).(time.Duration)
	return d, ok
}

type opIDKey struct{}

// WithOperationID returns a context under which Client.Invoke uses id as
// the operation ID instead of drawing a random one. The ID is what servers
// deduplicate on and what handlers see in AttemptInfo.OpID, so a caller
// that chooses it can trace its operation on every node, and can make a
// retry of the same operation idempotent by sending it under the same ID.
// Two different operations under one ID are one operation to the servers:
// the second is answered with the first's result. An ID must therefore be
// unique, e.g. 16 bytes from crypto/rand.
func WithOperationID(ctx context.Context, id [16]byte) context.Context {
	return context.WithValue(ctx, opIDKey{}, id)
}

// operationID returns the ID set by WithOperationID, if any.
func operationID(ctx context.Context) ([16]byte, bool) {
	id, ok := ctx.Value(opIDKey{}).([16]byte)
	return id, ok
}
