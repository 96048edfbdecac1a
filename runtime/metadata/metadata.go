// Package metadata carries key-value pairs with a call, beside its
// arguments: a trace context, an auth principal, a request ID. It is shaped
// like google.golang.org/grpc/metadata: a client puts metadata in the
// context it calls with (NewOutgoingContext, AppendToOutgoingContext), it
// crosses the wire with every attempt of the operation, and the handler
// reads it from its own context (FromIncomingContext).
//
// Keys are lowercase ASCII letters, digits and "-", "_", "."; constructors
// lowercase them, as gRPC's do. Values are any bytes. The metadata of one
// call is bounded (MaxSize); a call whose metadata breaks a rule fails
// before anything is sent, with an error matching ErrInvalid or
// ErrTooLarge.
package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ffgen/ffgen/runtime/internal/mdctx"
)

// MD maps lowercase keys to their values.
type MD map[string][]string

// MaxSize bounds the metadata of one call. Each value counts its key's
// length, its own length and 32 bytes of overhead, as HTTP/2 counts header
// lists (RFC 7541), so that many empty values cost something too.
const MaxSize = 8 << 10

// entryOverhead is the per-value overhead MaxSize counts.
const entryOverhead = 32

var (
	// ErrInvalid matches the error for a key outside the allowed
	// characters or empty.
	ErrInvalid = errors.New("metadata: invalid key")
	// ErrTooLarge matches the error for metadata over MaxSize.
	ErrTooLarge = errors.New("metadata: too large")
)

// New returns metadata with one value per key of m; keys are lowercased.
func New(m map[string]string) MD {
	md := make(MD, len(m))
	for k, v := range m {
		k = strings.ToLower(k)
		md[k] = append(md[k], v)
	}
	return md
}

// Pairs returns metadata from alternating keys and values; keys are
// lowercased. It panics on an odd number of strings, as gRPC's does: that
// is a programming error, not input.
func Pairs(kv ...string) MD {
	if len(kv)%2 == 1 {
		panic(fmt.Sprintf("metadata: Pairs got an odd number of strings: %d", len(kv)))
	}
	md := make(MD, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k := strings.ToLower(kv[i])
		md[k] = append(md[k], kv[i+1])
	}
	return md
}

// Len returns the number of keys.
func (md MD) Len() int { return len(md) }

// Copy returns a deep copy.
func (md MD) Copy() MD {
	out := make(MD, len(md))
	for k, v := range md {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Get returns the values of key (lowercased first).
func (md MD) Get(key string) []string { return md[strings.ToLower(key)] }

// Set replaces the values of key (lowercased first).
func (md MD) Set(key string, vals ...string) {
	if len(vals) == 0 {
		return
	}
	md[strings.ToLower(key)] = vals
}

// Append adds vals to the values of key (lowercased first).
func (md MD) Append(key string, vals ...string) {
	if len(vals) == 0 {
		return
	}
	k := strings.ToLower(key)
	md[k] = append(md[k], vals...)
}

// Delete removes key (lowercased first).
func (md MD) Delete(key string) { delete(md, strings.ToLower(key)) }

// Join merges mds; values of a key appear in the order of mds.
func Join(mds ...MD) MD {
	out := MD{}
	for _, md := range mds {
		for k, v := range md {
			out[k] = append(out[k], v...)
		}
	}
	return out
}

// Validate reports the first rule md breaks: a key that is empty or has a
// character outside a-z, 0-9, "-", "_", "." (ErrInvalid), or a size over
// MaxSize (ErrTooLarge). Calls run it before they send anything; callers
// may run it earlier.
func Validate(md MD) error {
	size := 0
	for k, vs := range md {
		if err := validKey(k); err != nil {
			return err
		}
		for _, v := range vs {
			size += len(k) + len(v) + entryOverhead
		}
	}
	if size > MaxSize {
		return fmt.Errorf("%w: %d bytes, limit %d (key and value lengths plus %d per value)", ErrTooLarge, size, MaxSize, entryOverhead)
	}
	return nil
}

func validKey(k string) error {
	if k == "" {
		return fmt.Errorf("%w: empty", ErrInvalid)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' {
			continue
		}
		return fmt.Errorf("%w %q: byte %d is %q; keys are lowercase a-z, 0-9, '-', '_', '.'", ErrInvalid, k, i, c)
	}
	return nil
}

// NewOutgoingContext returns a context under which calls send md. It
// replaces any metadata ctx already carries for sending.
func NewOutgoingContext(ctx context.Context, md MD) context.Context {
	return context.WithValue(ctx, mdctx.OutgoingKey{}, md)
}

// AppendToOutgoingContext returns a context under which calls send the
// metadata ctx carries plus the alternating keys and values kv. The
// metadata in ctx is not modified. It panics on an odd number of strings.
func AppendToOutgoingContext(ctx context.Context, kv ...string) context.Context {
	old, _ := ctx.Value(mdctx.OutgoingKey{}).(MD)
	return NewOutgoingContext(ctx, Join(old, Pairs(kv...)))
}

// FromOutgoingContext returns a copy of the metadata calls under ctx send.
func FromOutgoingContext(ctx context.Context) (MD, bool) {
	md, ok := ctx.Value(mdctx.OutgoingKey{}).(MD)
	if !ok {
		return nil, false
	}
	return md.Copy(), true
}

// NewIncomingContext returns a context that carries md as received
// metadata. The runtime gives every handler its metadata without it; it is
// for tests of handlers and interceptors.
func NewIncomingContext(ctx context.Context, md MD) context.Context {
	return context.WithValue(ctx, mdctx.IncomingKey{}, md)
}

// FromIncomingContext returns a copy of the metadata the call being handled
// under ctx carries, and false if it carries none.
func FromIncomingContext(ctx context.Context) (MD, bool) {
	md, ok := ctx.Value(mdctx.IncomingKey{}).(MD)
	if !ok || md == nil {
		return nil, false
	}
	return md.Copy(), true
}

// ValueFromIncomingContext returns the values of key in the incoming
// metadata, without copying the rest.
func ValueFromIncomingContext(ctx context.Context, key string) []string {
	md, _ := ctx.Value(mdctx.IncomingKey{}).(MD)
	return append([]string(nil), md[strings.ToLower(key)]...)
}
