package runtime

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/internal/pool"
	"github.com/ffgen/ffgen/runtime/transport"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Transport dials the servers. Required.
	Transport transport.Transport
	// Membership is the live view of the cluster. Required.
	Membership Membership
	// Settings are validated by NewClient; Groups is required.
	Settings Settings
	// Codec encodes arguments and decodes results. Default codec.Binary.
	Codec codec.Codec
	// Metrics receives client events. Default NopMetrics.
	Metrics Metrics
	// Logger receives suspicions. Default slog.Default().
	Logger *slog.Logger
	// Pool tunes dialing and reconnect backoff.
	Pool transport.PoolConfig
	// Interceptors wrap every operation, the first outermost.
	Interceptors []OperationInterceptor
	// AttemptInterceptors wrap every attempt, the first outermost.
	AttemptInterceptors []AttemptInterceptor
	// Limit tunes the adaptive limit on the attempts in flight to each
	// node (see LimitConfig and docs/runtime.md, "Overload").
	Limit LimitConfig
}

// Client runs operations against a cluster: it implements the client side
// of the fast-failover protocol for every generated typed client built on it.
// It is safe for concurrent use.
type Client struct {
	// Set by NewClient, read only after.
	cfg    ClientConfig
	router *router
	pool   *pool.Pool
	budget *budget
	unsub  func()
	// reporter is the membership, if it hears of failovers (see
	// failoverReporter).
	reporter failoverReporter
	// refresher is the membership, if it renews its view on request.
	refresher refresher

	// Safe for concurrent use on their own.
	nextCall atomic.Uint64
	closed   atomic.Bool // connections closing now are not a node's fault
	legs     legTable    // attempts and operations in flight
	ops      opPool      // operations to reuse
	limits   limits      // the attempts each node is sent at once
	latency  sync.Map    // *MethodDesc → *methodLatency, for limits
	settings sync.Map    // *MethodDesc → methodSettings
	leaders  sync.Map    // service → the node name a replicated write last succeeded on (client_leaderhint.go)

	// probes ends the background redials of unreachable nodes (probe)
	// when the client closes.
	probes     context.Context
	stopProbes context.CancelFunc

	mu       sync.Mutex           // guards the following
	suspects map[string]time.Time // node → suspected until
	strikes  map[string]strike    // node → its recent timeouts, which lengthen the next suspicion
	probing  map[string]*probing  // node → the redial of its suspicion in the background (probe)
	lastView map[string]time.Time // the previous membership view: each member's JoinedAt
	nsuspect atomic.Int32         // len(suspects): written under mu, read without it on every pick
}

var _ transport.ConnHandler = (*clientHandler)(nil)
var _ InFlighter = (*Client)(nil)

type methodSettings struct {
	s   Settings
	err error
}

// withDefaults fills the collaborators clients and servers share.
func withDefaults(cd *codec.Codec, m *Metrics, l **slog.Logger) {
	if *cd == nil {
		*cd = codec.Binary
	}
	if *m == nil {
		*m = NopMetrics{}
	}
	if *l == nil {
		*l = slog.Default()
	}
}

// NewClient validates cfg and subscribes to the membership.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Transport == nil {
		return nil, errors.New("ffgen: NewClient: no Transport")
	}
	if cfg.Membership == nil {
		return nil, errors.New("ffgen: NewClient: no Membership")
	}
	if err := cfg.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("ffgen: NewClient: %w", err)
	}
	withDefaults(&cfg.Codec, &cfg.Metrics, &cfg.Logger)
	cfg.Limit.withDefaults()
	c := &Client{
		cfg:      cfg,
		router:   newRouter(cfg.Settings.Groups),
		budget:   newBudget(cfg.Settings.Budget),
		suspects: make(map[string]time.Time),
		strikes:  make(map[string]strike),
		probing:  make(map[string]*probing),
	}
	c.probes, c.stopProbes = context.WithCancel(context.Background())
	c.reporter, _ = cfg.Membership.(failoverReporter)
	c.refresher, _ = cfg.Membership.(refresher)
	c.legs.init()
	c.limits.cfg = cfg.Limit
	c.pool = pool.New(cfg.Transport, (*clientHandler)(c), cfg.Pool)
	c.unsub = cfg.Membership.Subscribe(c.membershipChanged)
	return c, nil
}

// membershipChanged updates routing. A node that joins again is no longer
// suspected, whether the view showed it gone and back or only moved its
// JoinedAt (a restart quicker than the view is read): the membership has
// just vouched for it, and its suspicion was of the process or the
// absence before. Calls are serialized by Subscribe.
func (c *Client) membershipChanged(ms []Member) {
	c.router.update(ms)
	seen := make(map[string]time.Time, len(ms))
	for _, m := range ms {
		seen[m.Name] = m.JoinedAt
	}
	c.mu.Lock()
	for name, joined := range seen {
		if before, ok := c.lastView[name]; !ok || !joined.Equal(before) {
			delete(c.suspects, name)
			delete(c.strikes, name)
		}
	}
	c.nsuspect.Store(int32(len(c.suspects)))
	c.lastView = seen
	c.mu.Unlock()
}

// Close stops the client: it unsubscribes and closes its connections.
// Operations in flight end without failing over, and later ones fail at
// once; both with an *Error matching ErrClientClosed. Closing is not a
// node's fault: no node is suspected for it.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.stopProbes()
	c.unsub()
	c.pool.Close()
	return nil
}

// Invoke runs one operation of method m: args is sent, and on success the
// result is decoded into reply. It returns exactly one outcome, never later
// than the operation deadline (or ctx's, if sooner) plus scheduling delay:
// nil, the declared error itself for a Fail directive, or an *Error.
// The metadata in ctx (package metadata) goes with every attempt; so do
// the per-call options WithOperationID and WithOperationTimeout.
func (c *Client) Invoke(ctx context.Context, m *MethodDesc, args, reply codec.Message) error {
	if len(c.cfg.Interceptors) > 0 {
		return c.intercepted(ctx, m, args, reply)
	}
	return c.invoke(ctx, m, args, reply)
}

// invoke is Invoke below the operation interceptors.
func (c *Client) invoke(ctx context.Context, m *MethodDesc, args, reply codec.Message) error {
	s, err := c.settingsFor(m)
	if err != nil {
		return err
	}
	if d, ok := operationTimeout(ctx); ok {
		if d <= 0 {
			return fmt.Errorf("ffgen: %s.%s: WithOperationTimeout(%s): the timeout must be positive", m.Service, m.Name, d)
		}
		s.OperationTimeout = d
	}
	md, err := outgoingPairs(ctx)
	if err != nil {
		return fmt.Errorf("ffgen: %s.%s: %w", m.Service, m.Name, err)
	}
	start := time.Now()
	op := c.newOperation(m, s, reply, start)
	op.md = md
	defer op.release()
	if id, ok := operationID(ctx); ok {
		op.id = id
	} else {
		rand.Read(op.id[:])
		// Nobody else knows the ID, and attempts that go to distinct
		// groups never come back to a node: it need not remember.
		op.noRepeat = m.Mode == ModeFailover && s.MaxFailovers < len(c.router.groups)
	}
	if c.closed.Load() {
		return op.fail(ReasonClosed, ErrClientClosed)
	}
	op.entities = m.Entities(args, op.entityBuf[:0])
	if len(op.entities) == 0 {
		return fmt.Errorf("ffgen: %s.%s: no entity ID", m.Service, m.Name)
	}
	op.key = op.entities[0]
	if m.Mode == ModeScatter {
		op.key = leaderKey(m.Service)
	}
	if m.Mode == ModeScatter || m.Linearizable {
		op.leader, _ = c.leaderHint(m.Service)
	}
	op.payload, err = c.cfg.Codec.Append(op.payload[:0], args)
	if err != nil {
		return fmt.Errorf("ffgen: %s.%s: encode arguments: %w", m.Service, m.Name, err)
	}
	// The operation deadline is kept as data, not as a derived context:
	// the sequential path enforces it with the attempt timer and spares an
	// allocation-heavy context per call.
	op.deadline = start.Add(s.OperationTimeout)
	c.legs.track(op)
	defer c.legs.untrack(op)

	switch m.Mode {
	case ModeScatter:
		err = op.sequential(ctx, frame.FlagScatter)
	case ModeHedge:
		err = op.concurrent(ctx, m.Hedge)
	default:
		err = op.sequential(ctx, 0)
	}
	c.cfg.Metrics.OperationEnded(m.Service, m.Name, err == nil, time.Since(start))
	return err
}

func (c *Client) settingsFor(m *MethodDesc) (Settings, error) {
	if v, ok := c.settings.Load(m); ok {
		ms := v.(methodSettings)
		return ms.s, ms.err
	}
	err := c.cfg.Settings.validateMethod(m)
	s := c.cfg.Settings.forMethod(m)
	if err != nil {
		err = fmt.Errorf("ffgen: %w", err)
	}
	c.settings.Store(m, methodSettings{s, err})
	return s, err
}

// suspect marks node as locally suspected, so operations skip it for a
// while without paying a timeout again (see suspicionFor).
func (c *Client) suspect(node string, why Reason) {
	if c.cfg.Settings.SuspectFor <= 0 || c.closed.Load() {
		return
	}
	now := time.Now()
	c.mu.Lock()
	until, already := c.suspects[node]
	if already && !now.Before(until) {
		already = false // lapsed: this is a new suspicion, and a repeat
	}
	if !already {
		d := c.suspicionFor(node, why, now)
		until = now.Add(d)
		c.suspects[node] = until
		c.nsuspect.Store(int32(len(c.suspects)))
	}
	c.mu.Unlock()
	if !already {
		// "peer", as the transport names the node at the other end: "node"
		// is the caller's to bind to its own logger.
		c.cfg.Logger.Warn("ffgen: node suspected", "peer", node, "reason", why.String(), "for", until.Sub(now))
	}
}

// alive clears a suspicion: the node just proved it is alive. Its strikes
// stay, so that a node that keeps stalling is suspected longer each time.
// Every answer calls it, so the common case, nobody suspected, takes no
// lock.
func (c *Client) alive(node string) {
	if c.nsuspect.Load() == 0 {
		return
	}
	c.mu.Lock()
	delete(c.suspects, node)
	c.nsuspect.Store(int32(len(c.suspects)))
	c.mu.Unlock()
}

// suspected reports whether node is locally suspected now.
func (c *Client) suspected(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.suspectedLocked(node)
}

// suspectedLocked is suspected, called with c.mu held.
func (c *Client) suspectedLocked(node string) bool {
	until, ok := c.suspects[node]
	if ok && time.Now().After(until) {
		delete(c.suspects, node)
		c.nsuspect.Store(int32(len(c.suspects)))
		return false
	}
	return ok
}

// InFlight lists the operations this client is running.
func (c *Client) InFlight() []OpInfo { return c.legs.inFlight() }
