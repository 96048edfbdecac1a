package runtime

import "time"

// Metrics receives the engine's events. Implementations must be safe for
// concurrent use and cheap: they are called on the hot path. Stats is the
// implementation that runtime/cluster exposes over HTTP.
type Metrics interface {
	// AttemptStarted is called when the client sends an attempt.
	AttemptStarted(service, method string)
	// AttemptEnded is called when an attempt ends; reason is ReasonNone
	// when it produced the operation's outcome.
	AttemptEnded(service, method string, reason Reason, d time.Duration)
	// Failover is called when the client moves to another node because of reason.
	Failover(service, method string, reason Reason)
	// OperationEnded is called once per operation with its total latency.
	OperationEnded(service, method string, ok bool, d time.Duration)
	// ServerAttempt is called on the server when a handler starts (+1) and
	// ends (-1).
	ServerAttempt(service, method string, delta int)
	// Handled is called on the server when a handler run ends, with how
	// long it ran: status is the answer's ("ok", "fail", "failover") or
	// "forwarded" (ForwardTo); code is the declared error's wire code, the
	// engine's ("ffgen.panic", "ffgen.timeout", ...) or "undeclared" for
	// an error no rule matched, and empty for ok and forwarded. It is also
	// called, with status "refused", the engine's code and no duration,
	// for an attempt the server refused without running anything (it does
	// not serve the method, or not now: see Refused).
	Handled(service, method, status, code string, d time.Duration)
}

// NopMetrics discards every event.
type NopMetrics struct{}

func (NopMetrics) AttemptStarted(string, string)                         {}
func (NopMetrics) AttemptEnded(string, string, Reason, time.Duration)    {}
func (NopMetrics) Failover(string, string, Reason)                       {}
func (NopMetrics) OperationEnded(string, string, bool, time.Duration)    {}
func (NopMetrics) ServerAttempt(string, string, int)                     {}
func (NopMetrics) Handled(string, string, string, string, time.Duration) {}

var _ Metrics = NopMetrics{}
