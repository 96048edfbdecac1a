package runtime

import "fmt"

// Reason says why an attempt ended without a result the caller accepts. It
// travels in Attempt frames (frame.Prior.Reason), so values are fixed.
type Reason uint8

const (
	ReasonNone             Reason = 0
	ReasonHeartbeatTimeout Reason = 1  // no heartbeat within the heartbeat timeout
	ReasonAttemptTimeout   Reason = 2  // the attempt timeout passed
	ReasonConnBroken       Reason = 3  // the connection broke mid-attempt
	ReasonDialFailed       Reason = 4  // could not connect to the owner
	ReasonFailoverError    Reason = 5  // the handler returned a Failover error
	ReasonPanic            Reason = 6  // the handler panicked
	ReasonQueueFull        Reason = 7  // the connection's send queue was full
	ReasonNoMember         Reason = 8  // the group had no live member serving the service
	ReasonSuspected        Reason = 9  // the owner is locally suspected; skipped
	ReasonCancelled        Reason = 10 // the caller's context was cancelled, or a hedge loser
	ReasonDeadline         Reason = 11 // the operation deadline or the caller's context ended it
	ReasonBudget           Reason = 12 // the failover budget was spent
	ReasonTLS              Reason = 13 // the TLS handshake with the owner failed
	ReasonProtocol         Reason = 14 // the owner speaks another protocol or version
	ReasonTooLarge         Reason = 15 // the attempt exceeds the frame limit; no node can take it
	ReasonClosed           Reason = 16 // the client was closed
	// ReasonRefused: the node answered that it ran nothing of the
	// attempt (it does not serve the method or the replicated service
	// now, or could not take the write). Routing around it costs no
	// failover budget and no suspicion.
	ReasonRefused Reason = 17
	// ReasonOverloaded: the node refused the attempt unrun because it
	// had as much work or as many connections as it takes, or this
	// client held the attempt back (ClientConfig.Limit). The operation
	// ends with ErrOverloaded; no suspicion, no failover.
	ReasonOverloaded Reason = 18
)

var reasonNames = [...]string{
	ReasonNone:             "none",
	ReasonHeartbeatTimeout: "heartbeat-timeout",
	ReasonAttemptTimeout:   "attempt-timeout",
	ReasonConnBroken:       "conn-broken",
	ReasonDialFailed:       "dial-failed",
	ReasonFailoverError:    "failover-error",
	ReasonPanic:            "panic",
	ReasonQueueFull:        "queue-full",
	ReasonNoMember:         "no-member",
	ReasonSuspected:        "suspected",
	ReasonCancelled:        "cancelled",
	ReasonDeadline:         "deadline",
	ReasonBudget:           "budget",
	ReasonTLS:              "tls-failed",
	ReasonProtocol:         "protocol-mismatch",
	ReasonTooLarge:         "too-large",
	ReasonClosed:           "client-closed",
	ReasonRefused:          "refused",
	ReasonOverloaded:       "overloaded",
}

// String returns the reason's stable name, used in logs and metric labels.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}
