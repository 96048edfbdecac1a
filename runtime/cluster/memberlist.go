// Package cluster is a runtime.Membership on hashicorp/memberlist: nodes
// gossip their failure group, fast-failover address and services as node
// metadata, and every membership change reaches the routing table through
// Subscribe. It also serves the management HTTP endpoints (NewManagement).
//
// Membership here is slow on purpose: memberlist takes seconds to declare a
// crashed node dead, while the fast-failover client moves an operation to
// the next group within a heartbeat timeout. Membership only decides where
// the first attempt goes.
package cluster

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/hashicorp/memberlist"
)

// State is a node's state as this node sees it.
type State string

const (
	StateAlive   State = "alive"
	StateSuspect State = "suspect" // this node's probe failed; not yet dead
	StateLeaving State = "leaving" // announced it leaves; no new operations
	StateDead    State = "dead"    // declared failed by the failure detector
	StateLeft    State = "left"    // left gracefully
)

// MemberStatus is one node with its state, for the management endpoints.
type MemberStatus struct {
	Name          string   `json:"name"`
	Group         string   `json:"group"`
	Address       string   `json:"address"` // the fast-failover server
	GossipAddress string   `json:"gossip_address"`
	Services      []string `json:"services"`
	// Methods: what the node advertises of its services' methods
	// (runtime.Member.Methods), by service.
	Methods map[string][]runtime.ServedMethod `json:"methods,omitempty"`
	State   State                             `json:"state"`
	Since   time.Time                         `json:"since"` // when this node saw the state begin
	// JoinedAt is when this node saw it last join: its first join, its
	// return after it left or died, or a new process under its name
	// (runtime.Member.JoinedAt).
	JoinedAt time.Time `json:"joined_at,omitzero"`
	// CatchingUp is set while a replica on the node is behind: it answers
	// nothing of that service until it has caught up (see Config.Ready).
	CatchingUp bool `json:"catching_up,omitempty"`
	Local      bool `json:"local,omitempty"`

	boot uint64 // the process it last published (nodeMeta.Boot)
}

// Cluster is this node's membership in a memberlist cluster.
//
// Members lists alive and suspect nodes, as memberlist does: suspicion is
// frequently refuted, and routing away from a suspect owner would move
// entities back and forth; the fast-failover client already leaves an
// unresponsive owner within a heartbeat timeout. Leaving, dead and left
// nodes leave Members at once; AllMembers still lists them (dead and left
// ones for ForgetAfter).
type Cluster struct {
	cfg        Config
	boot       uint64 // this process's nodeMeta.Boot
	log        *slog.Logger
	ml         *memberlist.Memberlist
	meta       atomic.Pointer[[]byte] // what NodeMeta publishes
	catchingUp atomic.Bool            // published in meta; see followReadiness
	leaving    atomic.Bool            // Leave has begun
	failovers  failoverCounts         // of the clients that use this node's membership

	mu       sync.Mutex
	nodes    map[string]*MemberStatus
	subs     map[*subscriber]struct{}
	joinErr  error // the last join attempt's error
	stopping bool

	live     atomic.Pointer[[]runtime.Member]
	joined   atomic.Bool
	joinedCh chan struct{}
	// nameTaken is set when a join found this node's name on another
	// live node (NotifyMerge): the join is refused, not retried.
	nameTaken atomic.Pointer[error]

	life                sync.Mutex // orders Leave and halt: memberlist panics on leave after shutdown
	leaveOnce, haltOnce sync.Once
	leaveErr            error
	stop                chan struct{}
	wg                  sync.WaitGroup
}

var _ runtime.Membership = (*Cluster)(nil)

// DefaultLeaveTimeout bounds how long Shutdown waits for the leave message
// to go out.
const DefaultLeaveTimeout = 2 * time.Second

// Start creates the local node, starts gossip and, if Seeds are set, joins
// them: the first attempt before it returns (bounded by memberlist's TCP
// timeout per seed), the others in the background. It fails on an invalid
// config, metadata over memberlist's limit, a port that cannot be bound,
// or a name that a live node of the cluster already has (ErrNameTaken).
func Start(cfg Config) (*Cluster, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	catchingUp := cfg.Ready != nil && cfg.Ready() != nil
	boot := rand.Uint64() | 1 // never 0, which says nothing
	meta, err := cfg.meta(false, catchingUp, boot).encode()
	if err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		cfg:      cfg,
		boot:     boot,
		log:      lg,
		nodes:    make(map[string]*MemberStatus),
		subs:     make(map[*subscriber]struct{}),
		joinedCh: make(chan struct{}),
		stop:     make(chan struct{}),
	}
	c.meta.Store(&meta)
	c.catchingUp.Store(catchingUp)
	c.live.Store(new([]runtime.Member))
	mc := cfg.memberlistConfig()
	d := &delegate{c: c}
	mc.Delegate, mc.Events, mc.Ping, mc.Merge = d, d, d, d
	mc.Logger = log.New(&logWriter{log: c.log, suspect: func(name string) { c.transition(name, StateAlive, StateSuspect) }}, "", 0)
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("cluster: start %s on %s:%d: %w", cfg.Name, cfg.BindAddr, cfg.BindPort, err)
	}
	c.ml = ml
	if cfg.Ready != nil {
		c.wg.Add(1)
		go c.followReadiness()
	}
	if cfg.ReconnectInterval > 0 {
		c.wg.Add(1)
		go c.reconnectLoop()
	}
	if c.needsJoin() {
		// The first attempt is made before Start returns, so that a name
		// already taken is an error of Start and the process ends before
		// anyone has seen it; the others go on in the background.
		joined, err := c.join(1)
		if errors.Is(err, ErrNameTaken) {
			c.halt() // without leaving: the name is the other node's
			return nil, err
		}
		if !joined {
			c.log.Warn("cluster: join failed, retrying", "seeds", cfg.Seeds, "attempt", 1, "retry_in", cfg.JoinRetryMin, "err", err)
			c.wg.Add(1)
			go c.joinLoop(2)
		}
	} else {
		c.setJoined()
		c.log.Info("cluster: started a new cluster", "gossip", c.localAddr())
	}
	return c, nil
}

// Members returns the alive and suspect members, this node included,
// sorted by name. The caller must not modify it.
func (c *Cluster) Members() []runtime.Member { return *c.live.Load() }

// AllMembers returns every known node with its state, sorted by name: live
// ones and, for ForgetAfter, dead and left ones.
func (c *Cluster) AllMembers() []MemberStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]MemberStatus, 0, len(c.nodes))
	for _, n := range c.nodes {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Member returns one node's status.
func (c *Cluster) Member(name string) (MemberStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return MemberStatus{}, false
	}
	return *n, true
}

// LocalNode returns this node's status.
func (c *Cluster) LocalNode() MemberStatus {
	n, _ := c.Member(c.cfg.Name)
	return n
}

// Joined reports whether this node is part of a cluster: it started one
// (no seeds), a join succeeded, or another node joined it.
func (c *Cluster) Joined() bool { return c.joined.Load() }

// JoinedChan is closed once Joined is true.
func (c *Cluster) JoinedChan() <-chan struct{} { return c.joinedCh }

// JoinErr returns the last join attempt's error; nil once joined.
func (c *Cluster) JoinErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joinErr
}

// Leave announces that this node leaves, then broadcasts memberlist's leave
// message; each step waits up to timeout for its message to go out. Others
// stop routing new operations to it at the announcement and list it as
// left, not dead. The announcement is needed because memberlist reports a
// leave and a crash with the same event. Gossip keeps running until
// Shutdown. Calling Leave again returns the first result.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.leaveOnce.Do(func() {
		c.life.Lock()
		defer c.life.Unlock()
		c.mu.Lock()
		stopping := c.stopping
		c.mu.Unlock()
		if stopping {
			c.leaveErr = ErrShutdown
			return
		}
		c.leaving.Store(true)
		meta, err := c.cfg.meta(true, c.catchingUp.Load(), c.boot).encode()
		if err == nil {
			c.meta.Store(&meta)
			err = c.ml.UpdateNode(timeout)
		}
		if err != nil {
			// Still leave: peers will list the node as dead, not left.
			c.log.Warn("cluster: announcing leave failed", "err", err)
		}
		if err := c.ml.Leave(timeout); err != nil {
			c.leaveErr = fmt.Errorf("cluster: leave: %w", err)
		}
	})
	return c.leaveErr
}

// followReadiness publishes, in the node's metadata, whether a replica on
// it is catching up, so that every member's /cluster/members shows it.
// Polling keeps the replication engine free of a callback into gossip.
func (c *Cluster) followReadiness() {
	defer c.wg.Done()
	t := time.NewTicker(readinessEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		now := c.cfg.Ready() != nil
		if now == c.catchingUp.Load() {
			continue
		}
		// Not under c.life: halt holds it while it waits for this
		// goroutine. Once leaving, the leave announcement owns the
		// metadata.
		c.catchingUp.Store(now)
		if c.leaving.Load() {
			continue
		}
		if meta, err := c.cfg.meta(false, now, c.boot).encode(); err == nil {
			c.meta.Store(&meta)
			if err := c.ml.UpdateNode(time.Second); err != nil {
				c.log.Warn("cluster: publishing catch-up state failed", "err", err)
			}
		}
		c.mu.Lock()
		if n := c.nodes[c.cfg.Name]; n != nil {
			n.CatchingUp = now
			c.publish()
		}
		c.mu.Unlock()
	}
}

// readinessEvery is how often followReadiness looks.
const readinessEvery = 200 * time.Millisecond

// ErrShutdown is returned by operations on a cluster node that was shut down.
var ErrShutdown = errors.New("cluster: node is shut down")

// Shutdown leaves the cluster gracefully (unless Leave was called) and
// stops gossip, the join loop and subscribers. It is safe to call twice.
func (c *Cluster) Shutdown() error {
	err := c.Leave(DefaultLeaveTimeout)
	if errors.Is(err, ErrShutdown) {
		err = nil
	}
	return errors.Join(err, c.halt())
}

// halt stops the node without leaving: to others it looks like a crash.
func (c *Cluster) halt() error {
	var err error
	c.haltOnce.Do(func() {
		c.life.Lock()
		defer c.life.Unlock()
		c.mu.Lock()
		c.stopping = true
		subs := c.subs
		c.subs = nil
		c.mu.Unlock()
		close(c.stop)
		err = c.ml.Shutdown()
		c.wg.Wait()
		for s := range subs {
			s.cancel()
		}
	})
	return err
}

// localAddr is this node's gossip address.
func (c *Cluster) localAddr() string {
	n, _ := c.Member(c.cfg.Name)
	return n.GossipAddress
}

// setState records a node's state and rebuilds the live view if the set of
// members or their metadata changed. m is nil when only the state changes;
// boot is the process m came from (nodeMeta.Boot, 0 if unsaid).
func (c *Cluster) setState(name, gossipAddr string, m *runtime.Member, st State, catchingUp bool, boot uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	n, ok := c.nodes[name]
	if !ok {
		if m == nil {
			return // a state change about a node we never saw alive
		}
		n = &MemberStatus{Name: name, Local: name == c.cfg.Name}
		c.nodes[name] = n
	}
	wasLive := ok && isLive(n.State)
	if n.State != st {
		n.State, n.Since = st, now
	}
	if !wasLive && isLive(st) {
		n.JoinedAt = now
	}
	if gossipAddr != "" {
		n.GossipAddress = gossipAddr
	}
	changed := wasLive != isLive(st)
	if m != nil && boot != 0 {
		if wasLive && n.boot != 0 && n.boot != boot {
			// Another process under the name: a restart quicker than
			// the failure detector, which never showed the node gone.
			// Clients forget their suspicion of the process before.
			n.JoinedAt, changed = now, true
		}
		n.boot = boot
	}
	if m != nil && n.CatchingUp != catchingUp {
		n.CatchingUp, changed = catchingUp, true
	}
	if m != nil && (n.Group != m.Group || n.Address != m.Addr || !slices.Equal(n.Services, m.Services) ||
		!maps.EqualFunc(n.Methods, m.Methods, slices.Equal)) {
		n.Group, n.Address, n.Services, n.Methods = m.Group, m.Addr, m.Services, m.Methods
		changed = true
	}
	c.forget(now)
	if changed {
		c.publish()
	}
}

func isLive(s State) bool { return s == StateAlive || s == StateSuspect }

// gone records memberlist's leave event: a node that announced leaving
// has left, any other has died.
func (c *Cluster) gone(name string) {
	st := StateDead
	c.mu.Lock()
	if n, ok := c.nodes[name]; ok && n.State == StateLeaving {
		st = StateLeft
	}
	c.mu.Unlock()
	c.setState(name, "", nil, st, false, 0)
}

// forget drops dead and left nodes after ForgetAfter. Called with mu held.
func (c *Cluster) forget(now time.Time) {
	for name, n := range c.nodes {
		if !isLive(n.State) && c.cfg.ForgetAfter > 0 && now.Sub(n.Since) > c.cfg.ForgetAfter {
			delete(c.nodes, name)
		}
	}
}

// publish rebuilds the live view and wakes subscribers. Called with mu held.
func (c *Cluster) publish() {
	live := make([]runtime.Member, 0, len(c.nodes))
	for _, n := range c.nodes {
		if isLive(n.State) {
			live = append(live, runtime.Member{Name: n.Name, Group: n.Group, Addr: n.Address, Services: n.Services, CatchingUp: n.CatchingUp, Methods: n.Methods, JoinedAt: n.JoinedAt})
		}
	}
	slices.SortFunc(live, func(a, b runtime.Member) int { return strings.Compare(a.Name, b.Name) })
	c.live.Store(&live)
	if !c.joined.Load() && len(live) > 1 {
		// Another node joined us: our own attempts can stop.
		c.setJoinedLocked()
	}
	for s := range c.subs {
		s.wake()
	}
}

// transition moves a node from one live state to another; it does not
// change the live set, so subscribers are not woken.
func (c *Cluster) transition(name string, from, to State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[name]; ok && n.State == from {
		n.State, n.Since = to, time.Now()
	}
}

func (c *Cluster) setJoined() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setJoinedLocked()
}

func (c *Cluster) setJoinedLocked() {
	if !c.joined.Swap(true) {
		c.joinErr = nil
		close(c.joinedCh)
	}
}

// ReportFailover counts a failover of a client that uses this membership,
// for the node's page (runtime.Client calls it).
func (c *Cluster) ReportFailover(service, method string, reason runtime.Reason) {
	c.failovers.add(service, method, reason)
}
