package transport

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the node-wide limits of a TCP transport.
const (
	DefaultMaxConns         = 1024
	DefaultMaxBufferedBytes = 32 << 20
)

const (
	// connFootprint estimates what one connection costs beyond its
	// buffers (two goroutine stacks, the socket, TLS state), to tell when
	// enough connections closed that memory is worth giving back.
	connFootprint = 32 << 10
	// releaseMin is how far the footprint must fall before memory is
	// returned to the operating system, and releaseEvery how often at most.
	releaseMin   = 16 << 20
	releaseEvery = 10 * time.Second
	// releaseDelay is the quiet time, without refusals, before memory is
	// returned: a wave of closing connections finishes first, and the
	// forced collection, which can hold up calls for milliseconds, comes
	// after an attack rather than during it.
	releaseDelay = 5 * time.Second
	// releaseRefusals is how many refused connections make an attack
	// whose garbage is worth returning.
	releaseRefusals = 256
	// refusalLogEvery bounds the log lines per kind of refusal.
	refusalLogEvery = time.Second
)

// freeOSMemory returns freed memory to the operating system. Two
// collections: the first moves pooled chunks to the pools' victim caches,
// the second frees them.
func freeOSMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// refusal is a kind of connection the node refused or ended for cause.
type refusal uint8

const (
	refusedConnLimit refusal = iota
	refusedBufferLimit
	refusedFrameTimeout
	refusedHandshake
	refusedTLS
	refusedBadFrame
	refusedHandshakeLimit
	refusedAcceptRate
	numRefusals
)

// logPaced and logRatePaced are the log slots, beside the refusals', of
// the lines saying that new connections wait for a handshake slot, and
// for the accept rate.
const (
	logPaced = numRefusals + iota
	logRatePaced
	numLogSlots
)

var refusalMessages = [numRefusals]string{
	refusedConnLimit:      "transport: refused connection: connection limit reached",
	refusedBufferLimit:    "transport: closed connection: node read-buffer limit reached",
	refusedFrameTimeout:   "transport: closed connection: frame not completed in time",
	refusedHandshake:      "transport: refused connection: hello exchange failed",
	refusedTLS:            "transport: refused connection: TLS handshake failed",
	refusedBadFrame:       "transport: closed connection after a bad frame",
	refusedHandshakeLimit: "transport: refused connection: handshake limit reached",
	refusedAcceptRate:     "transport: refused connection: accept rate exceeded",
}

// NodeStats counts what one node's transport holds and what it refused.
// Counters only grow; Conns and BufferedBytes are current values.
type NodeStats struct {
	Conns             int64  // accepted connections, open or in their handshake
	BufferedBytes     int64  // bytes charged for frames larger than a connection's base buffer: twice the length of each
	RefusedConns      uint64 // accepted and closed at once: MaxConns reached
	BufferLimit       uint64 // closed because MaxBufferedBytes was reached
	FrameTimeouts     uint64 // closed with a frame unfinished after FrameTimeout
	IdleClosed        uint64 // closed after IdleTimeout without a frame
	HandshakeFailures uint64 // accepted, but the hello exchange failed or timed out
	TLSFailures       uint64 // accepted, but the TLS handshake failed
	BadFrames         uint64 // closed after a malformed, unknown or oversized frame
	Handshakes        int64  // connections in their TLS and Hello exchange
	Paced             uint64 // times accepting paused: every handshake slot taken (MaxHandshakes), or the accept rate reached (AcceptRate)
	HandshakeLimit    uint64 // accepted and closed at once: no handshake slot freed within HandshakeWait
	AcceptRateLimit   uint64 // accepted and closed at once: new connections came faster than AcceptRate for a second
}

// guard enforces one node's limits on connections, handshakes and
// buffered bytes, counts what it refuses, logs it at a bounded rate, and
// gives memory back to the operating system once a burst of connections
// has gone.
//
// Its two locks, logMu and relMu, are never held together.
type guard struct {
	// Set when the transport is made, and not changed after.
	maxConns    int64 // <= 0: no limit
	maxBuffered int64 // <= 0: no limit
	shakes      *handshakeSlots
	log         *slog.Logger
	// freeMemory returns freed memory to the operating system: freeOSMemory,
	// or, in tests, a count of the releases.
	freeMemory func()

	conns    atomic.Int64
	buffered atomic.Int64
	idle     atomic.Uint64
	paced    atomic.Uint64
	counts   [numRefusals]atomic.Uint64

	// logMu guards the following, the log lines' pacing.
	logMu      sync.Mutex
	lastLog    [numLogSlots]time.Time
	suppressed [numLogSlots]int

	// relMu guards the following, the return of memory.
	relMu        sync.Mutex
	peak         int64 // footprint high-water mark since the last release
	refusedSince int   // refusals since the last release
	lastRefusal  time.Time
	lastRelease  time.Time
	relTimer     *time.Timer
}

func newGuard(maxConns int, maxBuffered int64, log *slog.Logger) *guard {
	return &guard{maxConns: int64(maxConns), maxBuffered: maxBuffered, shakes: newHandshakeSlots(0), log: log, freeMemory: freeOSMemory}
}

// admit takes a connection slot; false means the node is full.
func (g *guard) admit() bool {
	n := g.conns.Add(1)
	if g.maxConns > 0 && n > g.maxConns {
		g.conns.Add(-1)
		return false
	}
	g.grew()
	return true
}

// leave gives a connection slot back.
func (g *guard) leave() {
	g.conns.Add(-1)
	g.shrank()
}

// reserve charges n bytes of read buffer; false means the node's budget is
// spent and nothing was charged.
func (g *guard) reserve(n int64) bool {
	for {
		cur := g.buffered.Load()
		if g.maxBuffered > 0 && cur+n > g.maxBuffered {
			return false
		}
		if g.buffered.CompareAndSwap(cur, cur+n) {
			g.grew()
			return true
		}
	}
}

func (g *guard) unreserve(n int64) {
	if n > 0 {
		g.buffered.Add(-n)
		g.shrank()
	}
}

// refuse counts one refusal and logs it, at most once per refusalLogEvery
// per kind; the line says how many were not logged since the last one.
func (g *guard) refuse(kind refusal, addr, peer string, err error) {
	g.counts[kind].Add(1)
	now := time.Now()
	g.relMu.Lock()
	g.refusedSince++
	g.lastRefusal = now
	if g.refusedSince >= releaseRefusals {
		g.scheduleLocked()
	}
	g.relMu.Unlock()
	n, ok := g.mayLog(kind, now)
	if !ok {
		return
	}
	if peer != "" {
		g.log.Warn(refusalMessages[kind], "peer", peer, "addr", addr, "err", err, "unlogged_since_last", n)
		return
	}
	g.log.Warn(refusalMessages[kind], "addr", addr, "err", err, "unlogged_since_last", n)
}

// pacedAccept counts a pause of accepting, every handshake slot taken, and
// logs it at most once per refusalLogEvery: an honest reconnect storm can
// cause it, so it is news but not a warning.
func (g *guard) pacedAccept(addr string) {
	g.paced.Add(1)
	if n, ok := g.mayLog(logPaced, time.Now()); ok {
		g.log.Info("transport: pacing new connections: every handshake slot is taken",
			"addr", addr, "handshakes", g.shakes.active.Load(), "unlogged_since_last", n)
	}
}

// pacedRate counts a pause of accepting for the accept rate, and logs it
// like pacedAccept.
func (g *guard) pacedRate(addr string) {
	g.paced.Add(1)
	if n, ok := g.mayLog(logRatePaced, time.Now()); ok {
		g.log.Info("transport: pacing new connections: accept rate reached",
			"addr", addr, "unlogged_since_last", n)
	}
}

// mayLog reports whether a line of slot (a refusal, or logPaced) may be
// logged now, and how many were not since the last one.
func (g *guard) mayLog(slot refusal, now time.Time) (int, bool) {
	g.logMu.Lock()
	defer g.logMu.Unlock()
	if now.Sub(g.lastLog[slot]) < refusalLogEvery {
		g.suppressed[slot]++
		return 0, false
	}
	g.lastLog[slot] = now
	n := g.suppressed[slot]
	g.suppressed[slot] = 0
	return n, true
}

func (g *guard) stats() NodeStats {
	return NodeStats{
		Conns:             g.conns.Load(),
		BufferedBytes:     g.buffered.Load(),
		RefusedConns:      g.counts[refusedConnLimit].Load(),
		BufferLimit:       g.counts[refusedBufferLimit].Load(),
		FrameTimeouts:     g.counts[refusedFrameTimeout].Load(),
		IdleClosed:        g.idle.Load(),
		HandshakeFailures: g.counts[refusedHandshake].Load(),
		TLSFailures:       g.counts[refusedTLS].Load(),
		BadFrames:         g.counts[refusedBadFrame].Load(),
		Handshakes:        g.shakes.active.Load(),
		Paced:             g.paced.Load(),
		HandshakeLimit:    g.counts[refusedHandshakeLimit].Load(),
		AcceptRateLimit:   g.counts[refusedAcceptRate].Load(),
	}
}

func (g *guard) footprint() int64 {
	return g.buffered.Load() + g.conns.Load()*connFootprint
}

// grew records a new high-water mark.
func (g *guard) grew() {
	f := g.footprint()
	g.relMu.Lock()
	g.peak = max(g.peak, f)
	g.relMu.Unlock()
}

// shrank schedules a return of memory to the operating system when the
// footprint has fallen by releaseMin and to half its peak. The Go runtime
// would keep the freed heap until its next collection, which an idle node
// may not run for minutes: a node that absorbed an attack would hold the
// attack's memory long after it ended. Refusals schedule one too (see
// refuse): connections an attack opens may close too fast to raise the
// footprint, but not without garbage.
func (g *guard) shrank() {
	f := g.footprint()
	g.relMu.Lock()
	defer g.relMu.Unlock()
	if g.peak-f >= releaseMin && f <= g.peak/2 {
		g.scheduleLocked()
	}
}

// scheduleLocked arms the release unless it is armed: releaseDelay from
// now, and not within releaseEvery of the last one.
func (g *guard) scheduleLocked() {
	if g.relTimer != nil {
		return
	}
	wait := max(releaseDelay, time.Until(g.lastRelease.Add(releaseEvery)))
	g.relTimer = time.AfterFunc(wait, g.release)
}

// release returns memory once refusals have stopped for releaseDelay: while
// an attack goes on, it would only be taken again.
func (g *guard) release() {
	g.relMu.Lock()
	if wait := time.Until(g.lastRefusal.Add(releaseDelay)); wait > 0 {
		g.relTimer = time.AfterFunc(wait, g.release)
		g.relMu.Unlock()
		return
	}
	g.relMu.Unlock()
	g.freeMemory()
	g.relMu.Lock()
	g.lastRelease = time.Now()
	g.peak = g.footprint()
	g.refusedSince = 0
	g.relTimer = nil
	g.relMu.Unlock()
}
