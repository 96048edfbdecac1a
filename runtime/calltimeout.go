package runtime

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
