// Package pool keeps the connections of a client, or of a server to its
// peers: one per peer address, over any transport.Transport, redialed
// after a close and backed off after a failed dial.
package pool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Pool keeps one connection per peer address over any transport. A
// connection that closes is dropped and the next Get redials it. After a
// failed dial, Gets for that address fail at once until the backoff window
// ends, so callers fail over instead of waiting on a dead peer.
type Pool struct {
	// Set by New and not changed after.
	t       transport.Transport
	h       transport.ConnHandler
	cfg     transport.PoolConfig
	unacked time.Duration   // CloseUnackedAfter; 0 leaves it to TCP
	ctx     context.Context // cancelled by Close, ending dials in progress
	cancel  context.CancelFunc

	// mu guards the following, and every poolPeer's fields.
	mu     sync.Mutex
	peers  map[string]*poolPeer
	closed bool

	// live maps addresses to their connections, replaced whole whenever
	// one comes or goes, so that Lookup, on every call's path, takes no
	// lock that every caller shares.
	live atomic.Pointer[map[string]transport.Conn]
}

// poolPeer is one address's connection, or its dial; Pool.mu guards it.
type poolPeer struct {
	conn      transport.Conn
	dialing   chan struct{}      // closed when the dial in progress ends
	dialedAt  time.Time          // when the dial in progress began
	stopDial  context.CancelFunc // ends the dial in progress
	connected bool               // the dial in progress has connected and waits for the peer's Hello
	err       error              // the last dial's error, while backing off
	retryAt   time.Time
	failures  int
}

// An Option adjusts a Pool made by New.
type Option func(*Pool)

// CloseUnackedAfter makes the pool's connections close once data they sent
// stays unacknowledged for d (conncap.WithUnackedTimeout): the next Get
// dials anew, and a fresh connection carries as soon as a partition heals.
func CloseUnackedAfter(d time.Duration) Option { return func(p *Pool) { p.unacked = d } }

// New returns a Pool that dials with t; h receives the frames and the
// close of every pooled connection.
func New(t transport.Transport, h transport.ConnHandler, cfg transport.PoolConfig, opts ...Option) *Pool {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = transport.DefaultPoolDialTimeout
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = transport.DefaultBackoffMin
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(transport.DefaultBackoffMax, cfg.BackoffMin)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{t: t, h: h, cfg: cfg, ctx: ctx, cancel: cancel, peers: make(map[string]*poolPeer)}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Get returns the live connection to addr, dialing one if there is none.
// Concurrent Gets for one address share one dial; ctx bounds only this
// caller's wait, not the shared dial; a wait that ends after the dial
// connected, while it waits for the peer's Hello, fails with ErrHelloLate.
// Within the backoff window after a failed dial, Get fails at once with
// an error wrapping the dial's error.
func (p *Pool) Get(ctx context.Context, addr string) (transport.Conn, error) {
	return p.get(ctx, addr, false, 0)
}

// Redial is Get without the backoff window: with no connection to addr,
// it dials now, however recently a dial failed. It is for a caller that
// retests a peer at a pace of its own. A dial in flight that has not
// connected within stale is given up for a new one: its connect was most
// likely lost to a partition that has healed since, and TCP sends a lost
// SYN again only a second later, then three. Joined, such a dial kept
// every retest of a node waiting on it for up to a second after a
// partition healed, each retest failing at its own bound.
func (p *Pool) Redial(ctx context.Context, addr string, stale time.Duration) (transport.Conn, error) {
	return p.get(ctx, addr, true, stale)
}

func (p *Pool) get(ctx context.Context, addr string, now bool, stale time.Duration) (transport.Conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: pool is closed", transport.ErrClosed)
		}
		pp := p.peers[addr]
		if pp == nil {
			pp = &poolPeer{}
			p.peers[addr] = pp
		}
		if pp.conn != nil {
			c := pp.conn
			p.mu.Unlock()
			return c, nil
		}
		if pp.dialing != nil && now && stale > 0 && !pp.connected && time.Since(pp.dialedAt) >= stale {
			// Its waiters join the new dial; its result is dropped.
			pp.stopDial()
			pp.dialing = nil
		}
		if pp.dialing == nil {
			if wait := time.Until(pp.retryAt); !now && pp.err != nil && wait > 0 {
				err := pp.err
				p.mu.Unlock()
				return nil, fmt.Errorf("transport: %s: not redialing for another %v after: %w", addr, wait.Round(time.Millisecond), err)
			}
			p.dialLocked(addr, pp)
		}
		done := pp.dialing
		p.mu.Unlock()

		select {
		case <-done:
		case <-ctx.Done():
			p.mu.Lock()
			connected := pp.dialing == done && pp.connected
			p.mu.Unlock()
			if connected {
				return nil, fmt.Errorf("transport: waiting for a connection to %s: %w: %w", addr, transport.ErrHelloLate, context.Cause(ctx))
			}
			return nil, fmt.Errorf("transport: waiting for a connection to %s: %w", addr, context.Cause(ctx))
		}
		p.mu.Lock()
		conn, err, newer := pp.conn, pp.err, pp.dialing != nil
		p.mu.Unlock()
		switch {
		case conn != nil:
			return conn, nil
		case newer:
			// This dial was given up for a newer one: wait for that.
		case err != nil:
			return nil, err
		}
		// The new connection already closed, or a newer dial is under
		// way: try again.
	}
}

// dialLocked starts a dial of addr, which owns it and ends it by closing
// pp.dialing. Called with p.mu held.
func (p *Pool) dialLocked(addr string, pp *poolPeer) {
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	pp.dialing, pp.dialedAt, pp.stopDial, pp.connected = done, time.Now(), cancel, false
	go p.dial(ctx, addr, pp, done)
}

// dial dials addr for pp, and records the outcome unless the dial was
// given up for a newer one meanwhile (Redial); it closes done when it
// ends.
func (p *Pool) dial(ctx context.Context, addr string, pp *poolPeer, done chan struct{}) {
	if p.unacked > 0 {
		ctx = conncap.WithUnackedTimeout(ctx, p.unacked)
	}
	ctx = conncap.WithDialConnected(ctx, func() {
		p.mu.Lock()
		if pp.dialing == done {
			pp.connected = true
		}
		p.mu.Unlock()
	})
	h := newPooledHandler(p, addr)
	c, err := p.t.Dial(ctx, addr, h)

	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(done)
	if pp.dialing != done {
		if err == nil {
			go c.Close() // given up; not under p.mu
		}
		return
	}
	pp.stopDial()
	pp.dialing, pp.stopDial, pp.connected = nil, nil, false
	if err != nil {
		pp.err = err
		pp.failures++
		pp.retryAt = time.Now().Add(p.backoff(pp.failures))
		return
	}
	pp.err, pp.failures, pp.retryAt = nil, 0, time.Time{}
	switch {
	case p.closed:
		go c.Close() // closing flushes; not under p.mu
	case h.closed:
		// It closed before Dial returned; HandleClose found nothing to drop.
	default:
		pp.conn = c
		p.publishLocked()
	}
}

// publishLocked replaces the live map. Called with p.mu held.
func (p *Pool) publishLocked() {
	m := make(map[string]transport.Conn, len(p.peers))
	if !p.closed {
		for addr, pp := range p.peers {
			if pp.conn != nil {
				m[addr] = pp.conn
			}
		}
	}
	p.live.Store(&m)
}

// backoff returns the wait after the n-th consecutive failure: BackoffMin
// doubled per failure, capped at BackoffMax, with the upper half jittered
// so that many clients do not redial in step.
func (p *Pool) backoff(n int) time.Duration {
	d := p.cfg.BackoffMax
	if n-1 < 32 {
		d = min(p.cfg.BackoffMin<<(n-1), p.cfg.BackoffMax)
	}
	if d < p.cfg.BackoffMin { // overflowed
		d = p.cfg.BackoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// drop forgets c if it is addr's current connection.
func (p *Pool) drop(addr string, c transport.Conn, h *pooledHandler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.closed = true
	pp := p.peers[addr]
	if pp == nil || pp.conn != c {
		return
	}
	pp.conn = nil
	if pp.dialing == nil && pp.err == nil {
		delete(p.peers, addr)
	}
	p.publishLocked()
}

// Discard forgets c if it is addr's connection, so that the next Get
// dials, without waiting for c to report its close: for a caller that
// found c closing, as a connection closed for idleness is.
func (p *Pool) Discard(addr string, c transport.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pp := p.peers[addr]; pp != nil && pp.conn == c {
		pp.conn = nil
		p.publishLocked()
	}
}

// Lookup returns the live connection to addr, or nil, without dialing: the
// fast path that spares callers a dial context when a connection exists.
func (p *Pool) Lookup(addr string) transport.Conn {
	if m := p.live.Load(); m != nil {
		return (*m)[addr]
	}
	return nil
}

// Conns returns the live connections.
func (p *Pool) Conns() []transport.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cs []transport.Conn
	for _, pp := range p.peers {
		if pp.conn != nil {
			cs = append(cs, pp.conn)
		}
	}
	return cs
}

// Close closes every pooled connection and ends dials in progress; later
// Gets fail with ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.publishLocked()
	p.cancel()
	var cs []transport.Conn
	for _, pp := range p.peers {
		if pp.conn != nil {
			cs = append(cs, pp.conn)
		}
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	return nil
}

var (
	_ transport.ConnHandler = (*pooledHandler)(nil)
	_ conncap.BatchEnder    = (*pooledHandler)(nil)
)

// pooledHandler forwards a pooled connection's events to the pool's
// handler, dropping the connection from the pool first when it closes.
type pooledHandler struct {
	pool   *Pool
	addr   string
	h      transport.ConnHandler
	be     conncap.BatchEnder // h, if it hears where batches end
	closed bool               // guarded by pool.mu
}

func newPooledHandler(p *Pool, addr string) *pooledHandler {
	be, _ := p.h.(conncap.BatchEnder)
	return &pooledHandler{pool: p, addr: addr, h: p.h, be: be}
}

func (h *pooledHandler) HandleFrame(c transport.Conn, f frame.Frame) { h.h.HandleFrame(c, f) }

// HandleBatchEnd passes the end of a batch on. A wrapper that kept it to
// itself left a server's raft messages from a peer, on the connection
// this node had dialed to it, waiting in the inbox for the next tick: a
// leader that used such a connection (its own dial was backing off when
// the follower's came) committed each write a tick late for as long as
// the connection lived.
func (h *pooledHandler) HandleBatchEnd() {
	if h.be != nil {
		h.be.HandleBatchEnd()
	}
}

func (h *pooledHandler) HandleClose(c transport.Conn, err error) {
	h.pool.drop(h.addr, c, h)
	h.h.HandleClose(c, err)
}
