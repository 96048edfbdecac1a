// Package transport carries the fast-failover protocol's frames between
// nodes: TCP with optional TLS (tcp.go), which reads frames off each
// connection (reader.go) after a Hello exchange (handshake.go) and writes
// them without a writer goroutine (stream.go). The frames themselves, their
// format and encoding, are the module's internal/frame. The in-memory
// network with switchable faults that tests run on is not part of this
// package; tests of services reach it through runtime/fftest.
//
// The Transport interface is small on purpose. Capabilities that not every
// transport has, and that only the runtime uses, are optional interfaces
// (runtime/internal/conncap), discovered with a type assertion, as in
// hashicorp/memberlist.
package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
)

// Transport makes connections. Dialing and listening both exchange Hello
// frames before they return a connection, so Conn.Peer is always known.
type Transport interface {
	// Dial connects to the node listening at addr. h receives the frames
	// that arrive on the connection.
	Dial(ctx context.Context, addr string, h ConnHandler) (Conn, error)
	// Listen accepts connections at addr; h receives the frames of every
	// accepted connection.
	Listen(addr string, h ConnHandler) (Listener, error)
}

// ConnHandler receives the frames of a connection, and its end. For one
// connection, calls come in arrival order, one at a time, from the
// goroutine that reads it; a handler must not block for long, or it stalls
// that connection (never others). The one exception is work handed to
// conncap.InlineConn's RunInline: once it overruns its grace, the next
// frames are handled by another goroutine while the call that started it
// lasts.
type ConnHandler interface {
	// HandleFrame is called for each frame after the Hello exchange. A
	// *Heartbeat, *Attempt or *Result, and the byte slices of any frame,
	// are valid only during the call, and, if the call runs work with
	// RunInline, only until then: copy what must outlive it.
	HandleFrame(c Conn, f frame.Frame)
	// HandleClose is called once when the connection ends, with the reason
	// (nil after a local Close).
	HandleClose(c Conn, err error)
}

// Conn is one connection to a peer. Its methods are safe for concurrent use.
type Conn interface {
	// Send encodes f and queues it for writing; f may be reused when Send
	// returns. It never blocks on the network: when the connection's queue
	// is full it returns an error matching ErrQueueFull and drops the frame.
	Send(f frame.Frame) error
	// Peer is the Hello the other side sent.
	Peer() frame.Hello
	// Close closes the connection; queued frames are flushed first on a
	// best-effort basis.
	Close() error
}

// Listener stops accepting when closed; open connections stay open.
type Listener interface {
	// Addr is the address peers dial, with the port resolved.
	Addr() string
	Close() error
}

// Errors of the frame format: of a frame this node was sent, or would
// send, that it cannot take. Each is wrapped with detail; ErrProtocol
// wraps the first three when the peer's Hello shows them.
var (
	ErrBadVersion     = frame.ErrBadVersion
	ErrUnknownType    = frame.ErrUnknownType
	ErrMalformedFrame = frame.ErrMalformed
	ErrFrameTooLarge  = frame.ErrTooLarge
)

// DefaultMaxFrameSize is Config.MaxFrameSize's default.
const DefaultMaxFrameSize = frame.DefaultMaxSize

// Errors a Conn or Transport returns; match them with errors.Is.
var (
	ErrClosed    = errors.New("transport: connection closed")
	ErrQueueFull = errors.New("transport: send queue full")
	ErrRefused   = errors.New("transport: connection refused")
	// ErrTLS means the TLS handshake failed: a missing or untrusted
	// certificate, or one side speaking TLS and the other not. It is not
	// wrapped in ErrRefused: the peer is up but will not talk to us as
	// configured.
	ErrTLS = errors.New("transport: TLS handshake failed")
	// ErrProtocol means the peer does not speak this protocol, or not
	// this version of it; the error wraps ErrBadVersion, ErrMalformedFrame
	// or ErrUnknownType for the detail.
	ErrProtocol = errors.New("transport: protocol mismatch")
	// ErrNotRPC means the address dialed answers in HTTP: it is an HTTP
	// port, such as a node's management address, not an ffgen RPC
	// listener. A dial wraps it in ErrProtocol.
	ErrNotRPC = errors.New("transport: not an ffgen RPC address")
	// ErrIdle ends a connection that carried no frame for the idle timeout.
	ErrIdle = errors.New("transport: connection idle")
	// ErrFrameTimeout ends a connection whose peer started a frame and did
	// not finish it within the frame timeout.
	ErrFrameTimeout = errors.New("transport: frame not completed in time")
	// ErrOverloaded refuses a connection, or ends one, when the node's
	// limit on connections or on buffered bytes is reached.
	ErrOverloaded = errors.New("transport: node at its connection or buffer limit")
	// ErrAtLimit is the error of a dial that the node refused at its
	// connection limit, saying so in its Hello: it is busy,
	// not gone. It matches ErrOverloaded.
	ErrAtLimit = fmt.Errorf("%w: the node refused the connection at its connection limit", ErrOverloaded)
	// ErrHelloLate is the error of a wait for a pooled connection whose
	// context ended while the dial it waited for had connected and was
	// waiting for the peer's Hello: the node accepted the connection and
	// is slow to answer, busy rather than gone. The dial goes on, bounded
	// by the handshake timeout; a later call waits for it.
	ErrHelloLate = errors.New("transport: the peer accepted the connection and has not said hello yet")
	// ErrInsecureListen refuses a plaintext listener beyond loopback.
	ErrInsecureListen = errors.New("transport: refusing to listen beyond loopback without TLS")
)

// ErrReset is the reason a connection ends when it is reset under it:
// by the peer's system (ECONNRESET), or, in the in-memory network tests
// run on, by a fault or by the far end's node going down. It matches
// ErrClosed.
var ErrReset = fmt.Errorf("transport: connection reset: %w", ErrClosed)

// Config is what every transport needs to know about the local node.
type Config struct {
	Node  string // this node's name, sent in Hello
	Group string // this node's failure group, sent in Hello
	// MaxFrameSize bounds each frame, in bytes. Default DefaultMaxFrameSize.
	MaxFrameSize int
	// SendQueueBytes bounds the encoded frames waiting on one connection.
	// Past it Send returns ErrQueueFull. Default DefaultSendQueueBytes.
	SendQueueBytes int
	// FrameTimeout bounds the time from the first byte of a frame to its
	// last, and a write to a peer that does not read. Default
	// DefaultFrameTimeout. Like IdleTimeout, it applies to streams (TCP);
	// the in-memory transport delivers whole frames and has neither.
	FrameTimeout time.Duration
	// IdleTimeout closes a connection that carried no frame either way for
	// that long. Heartbeats flow while any attempt is in flight, so only
	// connections with nothing to do reach it. The dialing side closes its
	// own idle connections after half of it, before the listening side
	// would, so a pooled connection is not closed under a caller. Default
	// DefaultIdleTimeout; negative disables it.
	IdleTimeout time.Duration
	// Logger receives connection-level events (bad frames, resets).
	// Default slog.Default().
	Logger *slog.Logger
}

// Defaults for Config.
const (
	DefaultSendQueueBytes = 8 << 20
	DefaultFrameTimeout   = 5 * time.Second
	DefaultIdleTimeout    = 2 * time.Minute
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.MaxFrameSize <= 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.SendQueueBytes <= 0 {
		c.SendQueueBytes = DefaultSendQueueBytes
	}
	if c.FrameTimeout <= 0 {
		c.FrameTimeout = DefaultFrameTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Defaults for PoolConfig.
const (
	DefaultPoolDialTimeout = 2 * time.Second
	DefaultBackoffMin      = 50 * time.Millisecond
	DefaultBackoffMax      = 5 * time.Second
)

// PoolConfig configures the pool of connections a client keeps, one per
// node it calls (runtime.ClientConfig.Pool).
type PoolConfig struct {
	// DialTimeout bounds one dial. Default DefaultPoolDialTimeout.
	DialTimeout time.Duration
	// BackoffMin is the wait after the first failed dial to an address;
	// each further failure doubles it, up to BackoffMax. A success resets
	// it. Defaults DefaultBackoffMin and DefaultBackoffMax.
	BackoffMin, BackoffMax time.Duration
}
