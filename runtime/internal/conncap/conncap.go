// Package conncap holds what a transport.Conn may do beyond that
// interface, which the runtime discovers with a type assertion, as in
// hashicorp/memberlist: run the work a frame starts on its read goroutine
// (InlineConn), let a caller waiting for an answer read it (CallerReadConn),
// count what it did (StatsConn), tell what arrived unread (UnreadConn), and
// tell when the frame being handled came (ReceivedAtConn); TCP connections
// do all five. A transport.ConnHandler may in turn hear
// where a batch of frames ends (BatchEnder). It also holds the hook by which a Transport's Dial says it has connected
// (DialConnected). They are internal: the runtime is their only user.
package conncap

import (
	"context"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
)

// InlineConn is a transport.Conn whose read goroutine can run the work a
// frame starts. TCP connections implement it; handlers discover it with a
// type assertion.
type InlineConn interface {
	// Queue adds f to the frames waiting to be written, without writing:
	// f goes out with the connection's next write, and at the latest once
	// the read goroutine has handled the frames it has read. Call it only
	// from HandleFrame. It fails as Send does.
	Queue(f frame.Frame) error
	// RunInline, called from HandleFrame, runs w.Run on the read
	// goroutine and returns true; or, when more frames are already read
	// and waiting, returns false at once, and the caller runs w elsewhere.
	// Should w run longer than grace, reading goes on on a new goroutine
	// meanwhile, and queued frames are written: a slow w delays the
	// frames behind it by grace at most. Call it at most once per
	// HandleFrame, after the frame's contents are no longer needed: the
	// new goroutine reuses the read buffer.
	RunInline(w interface{ Run() }, grace time.Duration) bool
	// RunAhead is RunInline for work that takes less time than handing
	// it to another goroutine costs: it runs w on the read goroutine
	// even when more frames are read and waiting, which then wait for w
	// as they would have waited for its handoff. The grace bounds it as
	// it bounds RunInline's.
	RunAhead(w interface{ Run() }, grace time.Duration)
}

// An Overrunner is work for RunInline that wants to know when it overran
// its grace, while it still runs: a server learns at once that a method it
// took for quick is not, instead of when the handler returns, which for a
// handler that waits on something may be much later, after many more calls
// have each held the reader for a grace of their own. Overran is called
// with the connection's lending lock held: it must not block.
type Overrunner interface{ Overran() }

// CallerReadConn is a transport.Conn that the goroutines waiting for its
// frames can read themselves. TCP connections implement it; clients discover it with a
// type assertion, and use the read goroutine of other Conns as before.
type CallerReadConn interface {
	// Expect adds delta to the answers awaited on the connection: +1 when
	// a caller starts to wait for one, -1 once it has been handed to the
	// caller or the caller gave up. A read goroutine leaves the reading
	// free only when none is awaited.
	Expect(delta int)
	// ReadFor, when no other goroutine reads the connection, reads and
	// handles its frames on the calling goroutine until w.Ready(), until
	// passes or ctx ends, and returns true; when another goroutine reads,
	// it returns false at once and the caller waits as before. Frames are
	// handled by the connection's transport.ConnHandler exactly as its read goroutine
	// would, the connection's end (HandleClose) included. A large frame is
	// left to a read goroutine. Either way w's owner then waits as before,
	// for the frames it expects, its timer or ctx. w counts among the
	// answers Expect counts until it is ready.
	ReadFor(ctx context.Context, w Waiter, until time.Time) bool
}

// ReceivedAtConn is a transport.Conn that knows when the frame its handler
// is handling came: the handler then need not read the clock again
// microseconds later. A clock reading costs about as much as decoding a
// small frame, and each side of a call read it several times. TCP
// connections implement it.
type ReceivedAtConn interface {
	// ReceivedAt, called from HandleFrame, returns when the read that
	// completed the frame being handled returned, or the zero Time if the
	// connection does not know.
	ReceivedAt() time.Time
}

// ReceivedAt returns when the frame c's handler is handling came, if c
// knows, or else now.
func ReceivedAt(c any) time.Time {
	if rc, ok := c.(ReceivedAtConn); ok {
		if at := rc.ReceivedAt(); !at.IsZero() {
			return at
		}
	}
	return time.Now()
}

// Waiter is a caller waiting for an answer.
type Waiter interface {
	// Ready reports whether the answer has been handed over.
	Ready() bool
}

// BatchEnder is a transport.ConnHandler that hears when a connection's
// reader has handled every frame it had read and is about to wait for the
// network again (or to run work that may take long, or has stopped
// reading; in a batch that takes long to handle, every few milliseconds
// too): work its HandleFrame calls left for later can go then, once for
// the whole batch. Replication uses it to hand raft the writes and messages
// that arrived together in one step: one Ready, one append to each
// follower, instead of one per frame. Both of the module's transports call
// it.
type BatchEnder interface {
	HandleBatchEnd()
}

// Stats counts what one connection did. Conns that can report it implement
// StatsConn.
type Stats struct {
	FramesSent, FramesReceived uint64
	BytesSent, BytesReceived   uint64
	Writes                     uint64 // write calls to the network: coalescing makes this < FramesSent
	QueueFull                  uint64 // frames dropped because the send queue was full
	CallerReads                uint64 // frames read by a caller awaiting one, not by a read goroutine (CallerReadConn)
}

// StatsConn is a transport.Conn that reports Stats.
type StatsConn interface {
	Stats() Stats
}

// UnreadConn is a transport.Conn that can tell what the peer sent and
// this process has not read yet. A heartbeat that arrived and waits in
// the socket while the goroutine that reads it waits for a core (a busy
// client process) is a silence of this process, not of the node: the
// client waits for its reader before it blames the node. TCP connections
// on Linux implement it.
type UnreadConn interface {
	// Unread returns the bytes received on the connection and not yet
	// read, or -1 when it cannot tell.
	Unread() int
}

// connectedKey is the context key of the function a Transport's Dial
// calls once it has connected and waits for the peer's Hello: a peer that
// accepted the connection is there, and a late Hello says it is busy
// (transport.ErrHelloLate), not gone.
type connectedKey struct{}

// WithDialConnected returns a context for a Dial that calls connected once
// it has connected and waits for the peer's Hello.
func WithDialConnected(ctx context.Context, connected func()) context.Context {
	return context.WithValue(ctx, connectedKey{}, connected)
}

// DialConnected, called by a Transport's Dial with its ctx once it has
// connected, tells the waiters of the dial that it did.
func DialConnected(ctx context.Context) {
	if f, ok := ctx.Value(connectedKey{}).(func()); ok {
		f()
	}
}

// unackedKey is the context key of how long a Transport's Dial lets data
// the connection sent stay unacknowledged before it closes the connection.
type unackedKey struct{}

// WithUnackedTimeout returns a context for a Dial whose connection closes
// once data it sent stays unacknowledged for d (TCP_USER_TIMEOUT where the
// system has it). A connection whose packets a partition drops otherwise
// stays open through it, and carries again only at TCP's next
// retransmission, whose wait doubles up to two minutes: long after the
// network healed.
func WithUnackedTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, unackedKey{}, d)
}

// UnackedTimeout returns the d of WithUnackedTimeout, or 0.
func UnackedTimeout(ctx context.Context) time.Duration {
	d, _ := ctx.Value(unackedKey{}).(time.Duration)
	return d
}
