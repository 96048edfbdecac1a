package runtime

import "context"

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
