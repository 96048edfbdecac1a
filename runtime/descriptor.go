package runtime

import (
	"context"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"
)

// Mode is how a method's operation reaches the cluster.
type Mode uint8

const (
	// ModeFailover sends to the entity's owner in the first failure group
	// and fails over to the next group (the default).
	ModeFailover Mode = iota
	// ModeScatter is a replicated write: the client sends it to the
	// service's raft leader (the node its last write succeeded on, else
	// the owner of the key ffgen.leader/<service>, which redirects it), the
	// leader acknowledges it once a majority of the voters hold it, and
	// every node applies it in log order (see ReplicationConfig).
	ModeScatter
	// ModeHedge follows the same group order as ModeFailover, but starts
	// the next attempt MethodDesc.Hedge after the previous one if no final
	// answer has come by then (heartbeats are no answer), or at once when
	// the running one fails over; the first final answer wins and the
	// other attempts are cancelled.
	ModeHedge
)

func (m Mode) String() string {
	switch m {
	case ModeFailover:
		return "failover"
	case ModeScatter:
		return "scatter"
	case ModeHedge:
		return "hedge"
	}
	return "mode(?)"
}

// Directive says what an error returned by a handler means.
type Directive uint8

const (
	// Fail returns the error to the caller; no other group is tried.
	Fail Directive = iota
	// Failover tries the next failure group.
	Failover
)

func (d Directive) String() string {
	if d == Failover {
		return "failover"
	}
	return "fail"
}

// ServiceDesc describes one service: generated code declares one per
// annotated interface.
type ServiceDesc struct {
	Name    string // the name on the wire, e.g. "bank.Accounts"
	Methods []*MethodDesc
}

// MethodDesc describes one method as plain data. The client reads the
// routing and error fields; the server also uses NewArgs and Handle.
type MethodDesc struct {
	Service string // equal to the owning ServiceDesc.Name; Register checks it
	Name    string
	Mode    Mode
	Hedge   time.Duration // ModeHedge: how long an attempt runs alone before the next one starts
	Hold    bool          // wait until no operation runs on the entity
	// Linearizable marks a read (not ModeScatter) of a replicated service
	// whose caller must see every write acknowledged before it called,
	// whichever node answers; a follower may otherwise answer before it has
	// applied them. Its first attempt goes to the leader when the client
	// knows it, where confirming the read costs least.
	Linearizable bool
	// Settings overrides the client's settings for this method.
	Settings MethodSettings
	// Default is the directive for errors that match no rule.
	Default Directive
	// Errors are the declared errors, tried in order; the first match wins.
	Errors []ErrorRule
	// Entities appends the operation's entity IDs to dst; the first routes.
	Entities func(args codec.Message, dst []string) []string
	// NewArgs returns an empty argument message for the server to decode into.
	NewArgs func() codec.Message
	// Handle calls the method on impl, the registered implementation.
	Handle func(ctx context.Context, impl any, args codec.Message) (codec.Message, error)
	// Schema identifies the method's recorded schema, for the nodes of a
	// cluster that runs several versions of the service at once.
	Schema MethodSchema
}

// MethodSettings are per-method overrides; a zero field inherits the client's
// setting.
type MethodSettings struct {
	AttemptTimeout   time.Duration
	OperationTimeout time.Duration
	HeartbeatTimeout time.Duration
	MaxFailovers     *int // nil inherits; generated code writes new(n)
}

// ErrorRule maps one declared error to a wire code and a directive, and
// rebuilds it on the client so errors.Is and errors.As work across the wire.
type ErrorRule struct {
	Code      string // unique within the method, e.g. "ErrInsufficientFunds"
	Directive Directive
	// Match reports whether err is this declared error (errors.Is for a
	// value, errors.As for a type).
	Match func(err error) bool
	// Encode returns the detail bytes for an error type; nil for values.
	Encode func(err error) []byte
	// Decode rebuilds the error on the client from the message and detail:
	// the sentinel value itself, or a decoded value of the error type.
	Decode func(message string, detail []byte) error
}
