package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
)

// Overload. A node takes on a bounded amount of work: past
// ServerConfig.MaxQueued operations waiting to start (on by default), as
// many as it starts in ServerConfig.QueueDelay while a queue stands (off
// by default, server_queuedelay.go), MaxPending operations queued or running, or MaxPendingPerEntity on one
// entity, an attempt is refused at arrival,
// before anything of it runs, with the code codeOverloaded and a hint of
// when to come back. A node at its connection limit (TCPConfig.MaxConns)
// says so in its Hello instead of closing the connection unexplained. The
// client ends the operation with ErrOverloaded in both cases: busy is not
// dead, so the node is not suspected and nothing fails over, which would
// only carry the load to the next group and risk running an operation
// twice for nothing.

// ErrOverloaded is matched (errors.Is) by the error of an operation that a
// node refused because it had as much work as it takes (or as many
// connections), or that this client did not send because it already had
// as many attempts in flight to the node as it has learned the node takes
// (see ClientConfig.Limit). Nothing of it ran (MaybeExecuted is false
// unless an earlier attempt may have run); it may be retried, best after
// RetryAfter.
var ErrOverloaded = errors.New("ffgen: node overloaded; the operation was not run")

// OverloadError says which node refused an attempt for overload, and when
// it suggests coming back. It matches ErrOverloaded.
type OverloadError struct {
	Node       string
	RetryAfter time.Duration // zero: no hint
	Detail     string
}

func (e *OverloadError) Error() string {
	s := fmt.Sprintf("ffgen: %s is overloaded; the attempt was not run", e.Node)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return s
}

// Is makes errors.Is(err, ErrOverloaded) hold.
func (e *OverloadError) Is(target error) bool { return target == ErrOverloaded }

// RetryAfter returns the retry-after hint of an error matching
// ErrOverloaded, and whether there is one.
func RetryAfter(err error) (time.Duration, bool) {
	var oe *OverloadError
	if errors.As(err, &oe) && oe.RetryAfter > 0 {
		return oe.RetryAfter, true
	}
	return 0, false
}

// codeOverloaded is the Code of a Failover result refusing an attempt for
// overload; its payload is the retry-after hint in microseconds (uvarint).
const codeOverloaded = "ffgen.overloaded"

// DefaultMaxQueued is the default ServerConfig.MaxQueued: operations
// waiting to start on a node. Enough to keep every core busy through the
// bursts of a few hundred callers, few enough that the wait adds tens of
// milliseconds, not seconds, to the calls it takes.
const DefaultMaxQueued = 64

// Admission limits for a service whose handlers are short (ServerConfig:
// off by default): past them such a node's answers wait in its queues
// longer than a heartbeat interval on two cores.
const (
	SuggestedMaxPending          = 512
	SuggestedMaxPendingPerEntity = 64
)

// admitLocked reports whether an attempt for e may be taken on, or the
// refusal to send instead. Called with s.mu held.
func (s *Server) admitLocked(e *execution) *frame.Result {
	why := ""
	if max := s.cfg.MaxQueued; max > 0 && s.waiting >= max {
		why = fmt.Sprintf("%d operations waiting to start, limit %d (ServerConfig.MaxQueued)", s.waiting, max)
	} else if d := s.delay.refusal(e.arrived, s.waiting); d != "" {
		why = d
	} else if max := s.cfg.MaxPending; max > 0 && len(s.execs) >= max {
		why = fmt.Sprintf("%d operations queued or running, limit %d (ServerConfig.MaxPending)", len(s.execs), max)
	} else if max := s.cfg.MaxPendingPerEntity; max > 0 {
		for _, id := range e.entities {
			if q := s.entities[id]; q != nil && len(q.queue)+len(q.held) >= max {
				why = fmt.Sprintf("%d operations queued or running on entity %q, limit %d (ServerConfig.MaxPendingPerEntity)",
					len(q.queue)+len(q.held), id, max)
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return overloadResult(s.cfg.OverloadRetryAfter, why)
}

// overloadResult is the refusal of an attempt for overload.
func overloadResult(retryAfter time.Duration, why string) *frame.Result {
	return &frame.Result{Status: frame.StatusFailover, Code: codeOverloaded, Message: why,
		Payload: binary.AppendUvarint(nil, uint64(retryAfter.Microseconds()))}
}

// overloadError rebuilds the refusal a node sent.
func overloadError(r *frame.Result, node string) *OverloadError {
	e := &OverloadError{Node: node, Detail: r.Message}
	if us, n := binary.Uvarint(r.Payload); n > 0 {
		e.RetryAfter = time.Duration(us) * time.Microsecond
	}
	return e
}

// Load is what a server holds against its admission limits.
type Load struct {
	Pending    int // operations queued or running now
	MaxPending int // ServerConfig.MaxPending; <= 0: no limit
	Queued     int // operations waiting to start now
	MaxQueued  int // ServerConfig.MaxQueued; <= 0: no limit
	// QueueDelay is the median time the operations that started in the
	// last 100 ms waited to start; past QueueDelayLimit (the unloaded
	// wait plus ServerConfig.QueueDelay) a queue stands, and the node
	// refuses work. Both zero when ServerConfig.QueueDelay is negative.
	QueueDelay, QueueDelayLimit time.Duration
}

// Load reports the operations queued or running on the server, and those
// waiting to start, against their limits, for metrics.
func (s *Server) Load() Load {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ld := Load{Pending: len(s.execs), MaxPending: s.cfg.MaxPending, Queued: s.waiting, MaxQueued: s.cfg.MaxQueued}
	ld.QueueDelay, ld.QueueDelayLimit = s.delay.queueDelay(now)
	return ld
}
