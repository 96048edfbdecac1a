package runtime

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Delivery says how far an operation got, so a caller knows whether a retry
// elsewhere is safe.
type Delivery uint8

const (
	// NotDelivered: no attempt reached a connection; nothing executed.
	NotDelivered Delivery = iota
	// Refused: attempts reached nodes, and each one answered that it
	// ran nothing of it (it did not serve the method, or a replicated
	// service was not served there at the moment, it redirected the
	// attempt to a node the client then did not reach, or the attempt's
	// time ran out while it was queued there); nothing executed, even if
	// the node acknowledged the attempt.
	Refused
	// Delivered: an attempt was sent but no node acknowledged it; it may
	// have executed.
	Delivered
	// Acknowledged: a node sent a heartbeat or a result for an attempt; it
	// may have executed.
	Acknowledged
)

func (d Delivery) String() string {
	switch d {
	case NotDelivered:
		return "not delivered"
	case Refused:
		return "refused, not executed"
	case Delivered:
		return "delivered, not acknowledged"
	}
	return "acknowledged"
}

// AttemptRecord is one attempt in an operation's history.
type AttemptRecord struct {
	Number   int
	Node     string // empty when no member could be chosen
	Group    string
	Reason   Reason // why it ended; ReasonNone for the attempt that produced the outcome
	Duration time.Duration
	Err      error // the failure it reported, if any
}

// Error is what Invoke returns for every failure except a declared error with
// the Fail directive, which comes back as itself. It unwraps to the cause: a
// context error for timeouts and cancellation (so errors.Is(err,
// context.DeadlineExceeded) holds), a declared error that asked for failover,
// a *RemoteError, or a transport error.
type Error struct {
	Service, Method string
	OpID            [16]byte
	Reason          Reason // why the operation ended
	Delivery        Delivery
	History         []AttemptRecord
	Err             error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ffgen: %s.%s: %s after %d attempt(s) (%s)", e.Service, e.Method, e.Reason, len(e.History), e.Delivery)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	for _, h := range e.History {
		node := h.Node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(&b, "; #%d %s/%s %s in %s", h.Number, h.Group, node, h.Reason, h.Duration.Round(time.Microsecond))
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// OpIDString returns the operation ID in hex, as logs print it.
func (e *Error) OpIDString() string { return hex.EncodeToString(e.OpID[:]) }

// MaybeExecuted reports whether the operation that returned err may have run
// on some node. It is false only for an *Error whose attempts never reached a
// connection or were refused by the nodes they reached; a declared Fail error
// means the handler ran.
func MaybeExecuted(err error) bool {
	if err == nil {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Delivery > Refused
	}
	return true
}

// RemoteError is an error the handler returned that the service did not
// declare: its text and where it happened. Code is the code the node sent:
// "" for an error the service does not declare, the name of a declared
// error this client's version of the service does not declare (a newer
// version added it), or one of the engine's own ("ffgen." and a name).
type RemoteError struct {
	Node, Service, Method string
	Code                  string
	Message               string
}

func (e *RemoteError) Error() string {
	if e.Code != "" && !strings.HasPrefix(e.Code, "ffgen.") {
		return fmt.Sprintf("remote error from %s in %s.%s: %s (declared as %s by the node's version of the service, not by this client's)", e.Node, e.Service, e.Method, e.Message, e.Code)
	}
	return fmt.Sprintf("remote error from %s in %s.%s: %s", e.Node, e.Service, e.Method, e.Message)
}

// Unwrap makes errors.Is match ErrUnimplemented and ErrBadArguments.
func (e *RemoteError) Unwrap() error {
	switch e.Code {
	case codeUnknownMethod:
		return ErrUnimplemented
	case codeBadArgs:
		return ErrBadArguments
	case codeVotersCannotApply:
		return ErrVotersCannotApply
	}
	return nil
}

// ErrUnimplemented is matched (errors.Is) by the error of a call that no
// node it reached serves: the method (or its service) is not in their
// version of the service, as a method added by a newer version is not during
// a rollout. No node ran it (MaybeExecuted is false), and refusals cost no
// failover budget.
var ErrUnimplemented = errors.New("ffgen: method not implemented by the nodes reached")

// ErrBadArguments is matched (errors.Is) by the error of a call whose
// arguments the node could not decode, such as a value too large for the
// field in the node's version of the service (a field widened from int32 to
// int64, and a node not yet upgraded). The handler did not run
// (MaybeExecuted is false).
var ErrBadArguments = errors.New("ffgen: the node could not decode the arguments")

// ErrVotersCannotApply is matched (errors.Is) by the error of a replicated
// write that the leader did not propose because a voter cannot apply it
// as sent: during a rollout, a node of a version without the method, or
// without a field the write's arguments carry, or whose kind of it cannot
// hold the value sent. Nothing ran (MaybeExecuted is false); the write
// goes through once every voter runs a version that applies it alike.
var ErrVotersCannotApply = errors.New("ffgen: a voter cannot apply the replicated write")

// Codes the engine itself puts in Result frames; user codes never start with "ffgen.".
const (
	codePanic         = "ffgen.panic"
	codeUnknownMethod = "ffgen.unknown-method"
	codeBadArgs       = "ffgen.bad-arguments"
	codeBadResult     = "ffgen.bad-result"
	codeTimeout       = "ffgen.timeout"
	// codeNotStarted: the node ended the attempt before its handler
	// started (its time ran out while it was queued or held, or the node
	// halted first). Nothing ran: the client does not count the attempt
	// as acknowledged.
	codeNotStarted = "ffgen.not-started"
	codeTooLarge   = "ffgen.result-too-large"
)

// ForwardError, returned by a handler (see ForwardTo), makes the server tell
// the client to send the attempt to another node and watch that node's
// heartbeats instead.
type ForwardError struct {
	Node string
}

func (e *ForwardError) Error() string { return "ffgen: attempt forwarded to " + e.Node }

// ForwardTo returns the error a handler returns to pass its attempt on to the
// named node, as Akka's Forward does.
func ForwardTo(node string) error { return &ForwardError{Node: node} }

// ErrNoRoute means no live member serves the service in any group.
var ErrNoRoute = errors.New("ffgen: no live member serves the service")

// ErrClientClosed is matched (errors.Is) by the error of an operation
// started after Client.Close, or ended by it.
var ErrClientClosed = errors.New("ffgen: client closed")
