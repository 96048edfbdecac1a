// Package mdctx holds the context keys of call metadata, shared by package
// metadata (which users call) and the runtime (which reads the outgoing
// metadata on every call without the copy metadata.FromOutgoingContext
// makes, and serves the incoming metadata from the handler's context
// without a context.WithValue per attempt).
package mdctx

// OutgoingKey is the context key of the metadata a client sends; its value
// is a metadata.MD.
type OutgoingKey struct{}

// IncomingKey is the context key of the metadata a handler received; its
// value is a metadata.MD.
type IncomingKey struct{}
