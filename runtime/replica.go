package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// Replication of scatter writes. Every service with a scatter method has a
// log on every node that serves it (one *replica). One node at a time is
// its sequencer (the leader of an epoch): it gives every write an index,
// sends it to the other nodes, and once enough of them hold it (the in-sync
// set, at least MinInSync nodes) the write is committed and every node runs
// it in index order. Writes of one entity therefore run in the same order on
// every replica, whichever client sent them. Design, guarantees and where
// the gamble remains: docs/ARCHITECTURE.md, "Replication".
//
// The files: replica.go (state, readiness, the loop), replica_log.go (the
// bounded log), replica_leader.go (sequencing, acknowledgements, commit,
// takeover), replica_follower.go (appends, catch-up, snapshots),
// replica_wire.go (messages). Everything is guarded by Server.mu.

// ReplicationConfig tunes the replicated log of scatter services.
type ReplicationConfig struct {
	// MinInSync is how many nodes, the sequencer included, must hold a
	// write before it is acknowledged. When fewer nodes serving the
	// service are alive, the live count is required instead. Default 2.
	MinInSync int
	// AckTimeout is how long the sequencer waits for a follower to
	// acknowledge a write before it leaves the in-sync set (the write then
	// commits without it, and the follower catches up later). It is also
	// how long a takeover waits for its peers. Default 100ms.
	AckTimeout time.Duration
	// LogEntries bounds the writes each node keeps for followers that fall
	// behind; one that falls further behind takes a snapshot. Default 100000.
	LogEntries int
}

func (c ReplicationConfig) withDefaults() ReplicationConfig {
	if c.MinInSync <= 0 {
		c.MinInSync = 2
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 100 * time.Millisecond
	}
	if c.LogEntries <= 0 {
		c.LogEntries = 100000
	}
	return c
}

// StateTransfer is implemented by a service whose replicas may need a copy
// of another's state: a node restarted empty, or one that fell further
// behind than the log reaches. Without it such a node can only catch up
// while its peers' logs still hold every write it missed.
//
// SnapshotState and RestoreState are never called while a replicated write
// runs on the node, so the state they see is that of one log position.
type StateTransfer interface {
	// SnapshotState encodes the whole replicated state.
	SnapshotState() ([]byte, error)
	// RestoreState replaces the whole replicated state with a snapshot.
	RestoreState(state []byte) error
}

// ReplicaStatus is how one replicated service stands on this node.
type ReplicaStatus struct {
	Service string `json:"service"`
	// Ready is false while the node is behind: it answers every attempt of
	// the service with Failover ("catching up") until it has caught up.
	Ready       bool      `json:"ready"`
	Behind      string    `json:"behind,omitempty"` // why it is behind
	BehindSince time.Time `json:"behind_since,omitzero"`
	Leader      string    `json:"leader,omitempty"` // the sequencer of the newest epoch known here
	Leading     bool      `json:"leading"`
	Epoch       string    `json:"epoch"`
	Commit      uint64    `json:"commit"`
	Applied     uint64    `json:"applied"`
	Running     int       `json:"running"`   // applied writes still running
	LogFirst    uint64    `json:"log_first"` // oldest write a follower can still replay from here
	InSync      []string  `json:"in_sync,omitempty"`
	CatchUps    uint64    `json:"catch_ups"`     // completed catch-ups
	Snapshots   uint64    `json:"snapshots"`     // state transfers received
	LastCatchUp string    `json:"last_catch_up"` // how long the last catch-up took
	// LastCatchUpSeconds is LastCatchUp for metrics.
	LastCatchUpSeconds float64      `json:"last_catch_up_seconds"`
	Divergences        []Divergence `json:"divergences,omitempty"`
}

// Divergence records writes this node had run that the newer epoch's
// sequencer did not have: a partition let two sequencers commit different
// writes. The newer epoch wins; these writes were undone by a state
// transfer from it.
type Divergence struct {
	At       time.Time `json:"at"`
	Winner   string    `json:"winner"` // the epoch that won
	Index    uint64    `json:"index"`  // first log position that differed
	Entities []string  `json:"entities"`
	Writes   int       `json:"writes"`
}

// maxDivergences bounds the divergence records a node keeps.
const maxDivergences = 64

type replica struct {
	s        *Server
	name     string
	reg      *registered
	transfer StateTransfer
	cfg      ReplicationConfig

	log       replicaLog
	epoch     epoch // the newest epoch seen or promised
	leading   bool  // this node sequences epoch
	commit    uint64
	applied   uint64 // dispatched to the entity queues, in index order
	running   int    // dispatched writes still running
	paused    bool   // dispatching waits for a snapshot
	snapWait  []func()
	snapping  int // snapshots being taken or installed: paused until none is (snapshotDone)
	everReady bool

	ready       bool
	behind      string
	behindSince time.Time
	catchUps    uint64
	snapshots   uint64
	lastCatchUp time.Duration
	divergences []Divergence

	followers    map[string]*follower
	matchBuf     []uint64 // advanceCommit's scratch
	takeover     *takeover
	parked       []*execution // writes waiting for a takeover to end
	fetch        *fetchState
	needSnapshot bool            // the state is wrong: only a snapshot helps
	snapBuf      []byte          // snapshot chunks received so far
	bootable     map[string]bool // peers that came up empty too
	lastTick     time.Time
	peersCache   []Member // peers() of the view whose first element is peersOf
	peersOf      *Member
	peersLen     int
	lastAppend   time.Time // when a sequencer last sent an Append
	stop         chan struct{}
}

// newReplica is called with s.mu held, when a service with a scatter
// method is registered.
func (s *Server) newReplica(reg *registered) *replica {
	r := &replica{
		s:         s,
		name:      reg.desc.Name,
		reg:       reg,
		cfg:       s.cfg.Replication.withDefaults(),
		followers: make(map[string]*follower),
		bootable:  make(map[string]bool),
		stop:      make(chan struct{}),
	}
	r.log.init()
	r.transfer, _ = reg.impl.(StateTransfer)
	if s.cfg.Node == "" {
		// A server that is not a cluster member (no Node) replicates
		// to nobody: it is its own sequencer from the start.
		r.setReady("alone")
	} else {
		r.setBehind("starting: waiting to compare with peers")
	}
	go r.loop()
	return r
}

func (r *replica) self() string { return r.s.cfg.Node }

// setBehind marks the node as behind: it takes no winning answers until it
// has caught up. Called with s.mu held.
func (r *replica) setBehind(why string) {
	if r.ready || r.behind == "" {
		r.behindSince = time.Now()
		if r.everReady {
			r.s.cfg.Logger.Warn("ffgen: replica behind; catching up", "service", r.name, "reason", why)
		}
	}
	r.ready = false
	r.behind = why
	if r.leading {
		r.stepDown("this node is behind: " + why)
	}
}

// setReady ends a catch-up. Called with s.mu held.
func (r *replica) setReady(how string) {
	if r.ready {
		return
	}
	took := time.Since(r.behindSince)
	r.ready, r.behind = true, ""
	if r.everReady || how != "alone" {
		r.catchUps++
		r.lastCatchUp = took
	}
	r.everReady = true
	r.s.cfg.Logger.Info("ffgen: replica caught up", "service", r.name, "how", how, "took", took,
		"applied", r.applied, "epoch", r.epoch.String())
}

// peers lists the live members other than this node that serve the
// service, sorted by name.
func (r *replica) peers() []Member {
	m := r.s.cfg.Membership
	if m == nil {
		return nil
	}
	all := m.Members()
	// Memberships hand out the same slice until the view changes: the
	// filtered, sorted list is kept for it, sparing every write the work.
	if len(all) == r.peersLen && (len(all) == 0 || &all[0] == r.peersOf) {
		return r.peersCache
	}
	var out []Member
	for _, mb := range all {
		if mb.Name != r.self() && mb.Serves(r.name) {
			out = append(out, mb)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	r.peersCache, r.peersLen, r.peersOf = out, len(all), nil
	if len(all) > 0 {
		r.peersOf = &all[0]
	}
	return out
}

// member finds a live peer by name.
func (r *replica) member(name string) (Member, bool) {
	for _, m := range r.peers() {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// naturalLeader reports whether this node is the sequencer clients try
// first: the node Client routes the service's scatter writes to when
// nobody is suspected (see sequencerKey). Called with s.mu held.
func (r *replica) naturalLeader() bool {
	m := r.s.cfg.Membership
	groups := r.s.cfg.Settings.Groups
	if m == nil || len(groups) == 0 {
		return true
	}
	rt := NewRouter(groups)
	rt.Update(m.Members())
	k := keyOf(sequencerKey(r.name))
	for _, g := range rt.groupOrderKey(k, nil) {
		if o, ok := rt.ownerKey(r.name, g, k, nil); ok {
			return o.Name == r.self()
		}
	}
	return true
}

// sequencerKey is the routing key of a service's writes: every client sends
// them to the same node, the owner of this key, so that one node orders them.
func sequencerKey(service string) string { return "ffgen.sequencer/" + service }

// loop drives what time drives: acknowledgement timeouts and keep-alives on
// a sequencer, catch-up retries on a node that is behind.
func (r *replica) loop() {
	t := time.NewTicker(r.cfg.AckTimeout / 2)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			r.s.mu.Lock()
			r.tick(now)
			r.s.mu.Unlock()
		}
	}
}

// tick is called with s.mu held.
func (r *replica) tick(now time.Time) {
	// A tick that comes far too late means this node was paused (SIGSTOP,
	// a VM freeze): the others went on without it.
	if !r.lastTick.IsZero() && now.Sub(r.lastTick) > 10*r.cfg.AckTimeout && r.ready && r.s.cfg.Membership != nil && len(r.peers()) > 0 {
		r.setBehind(fmt.Sprintf("this node was paused for %s", now.Sub(r.lastTick).Round(time.Millisecond)))
	}
	r.lastTick = now
	if r.leading {
		r.leaderTick(now)
	}
	r.maybeFinishTakeover(now)
	if !r.ready {
		r.catchUpTick(now)
	}
}

// close stops the loop. Called with s.mu held.
func (r *replica) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
}

// status is called with s.mu held.
func (r *replica) status() ReplicaStatus {
	st := ReplicaStatus{
		Service:     r.name,
		Ready:       r.ready,
		Behind:      r.behind,
		Leader:      r.epoch.Node,
		Leading:     r.leading,
		Epoch:       r.epoch.String(),
		Commit:      r.commit,
		Applied:     r.applied,
		Running:     r.running,
		LogFirst:    r.log.base + 1,
		CatchUps:    r.catchUps,
		Snapshots:   r.snapshots,
		Divergences: slices.Clone(r.divergences),
	}
	if r.lastCatchUp > 0 {
		st.LastCatchUp = r.lastCatchUp.String()
		st.LastCatchUpSeconds = r.lastCatchUp.Seconds()
	}
	if !r.ready {
		st.BehindSince = r.behindSince
	}
	if r.leading {
		st.InSync = append(st.InSync, r.self())
		for name, f := range r.followers {
			if f.inSync {
				st.InSync = append(st.InSync, name)
			}
		}
		slices.Sort(st.InSync)
	}
	return st
}

// Replication reports every replicated service's state on this node.
func (s *Server) Replication() []ReplicaStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ReplicaStatus, 0, len(s.replicas))
	for _, r := range s.replicas {
		out = append(out, r.status())
	}
	slices.SortFunc(out, func(a, b ReplicaStatus) int {
		if a.Service < b.Service {
			return -1
		}
		return 1
	})
	return out
}

// Ready reports whether every replicated service on this node is caught up,
// and if not, why: for readiness probes.
func (s *Server) Ready() error {
	for _, st := range s.Replication() {
		if !st.Ready {
			return fmt.Errorf("%s: catching up: %s", st.Service, st.Behind)
		}
	}
	return nil
}

// UseMembership sets the membership after the server was created, for
// memberships that need the server's address and services first (a
// cluster node starts its membership after Serve).
func (s *Server) UseMembership(m Membership) {
	s.mu.Lock()
	s.cfg.Membership = m
	s.mu.Unlock()
}

// peerConn returns the connection to a peer's server, dialing in the
// background when there is none yet: the replication protocol never waits
// on a dial under the lock. Called with s.mu held.
func (s *Server) peerConn(m Member) transport.Conn {
	if s.peers == nil || m.Addr == "" {
		return nil
	}
	if c := s.peers.Lookup(m.Addr); c != nil {
		return c
	}
	// A connection the peer opened to us carries our messages as well:
	// after a partition heals, one direction may still be backing off its
	// dials while the other already works.
	if c := s.peerIn[m.Name]; c != nil {
		return c
	}
	if s.dialing[m.Addr] {
		return nil
	}
	s.dialing[m.Addr] = true
	p := s.peers
	timeout := s.cfg.Replication.withDefaults().AckTimeout * 5
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		p.Get(ctx, m.Addr)
		cancel()
		s.mu.Lock()
		delete(s.dialing, m.Addr)
		s.mu.Unlock()
	}()
	return nil
}

// replicaFrame handles a replication message on any connection, from the
// listener (requests) or from the peer pool (answers).
func (s *Server) replicaFrame(c transport.Conn, f *transport.Replica, inbound bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inbound {
		s.peerIn[c.Peer().Node] = c
	}
	r := s.replicas[f.Service]
	if r == nil {
		if f.Kind == msgFetch {
			// Not registered here yet: it holds nothing, and says so
			// rather than let the asker wait for a timeout.
			sendReplica(c, f.Service, msgFetched, &fetchedMsg{status: ackNotReady, bootable: true})
		}
		return
	}
	from := c.Peer().Node
	var err error
	switch f.Kind {
	case msgAppend:
		var m appendMsg
		if err = decodeReplica(f, &m); err == nil {
			r.onAppend(c, &m)
		}
	case msgAck:
		var m ackMsg
		if err = decodeReplica(f, &m); err == nil {
			r.onAck(from, &m)
		}
	case msgRecover:
		var m recoverMsg
		if err = decodeReplica(f, &m); err == nil {
			r.onRecover(c, &m)
		}
	case msgRecovered:
		var m recoveredMsg
		if err = decodeReplica(f, &m); err == nil {
			r.onRecovered(from, &m)
		}
	case msgFetch:
		var m fetchMsg
		if err = decodeReplica(f, &m); err == nil {
			r.onFetch(c, &m)
		}
	case msgFetched:
		var m fetchedMsg
		if err = decodeReplica(f, &m); err == nil {
			r.onFetched(from, &m)
		}
	default:
		err = fmt.Errorf("unknown replication message %d", f.Kind)
	}
	if err != nil {
		s.cfg.Logger.Warn("ffgen: bad replication message", "peer", from, "service", f.Service, "err", err)
	}
}

// peerHandler receives answers on the connections this server dialed to
// its peers.
type peerHandler Server

func (h *peerHandler) HandleFrame(c transport.Conn, f transport.Frame) {
	if rf, ok := f.(*transport.Replica); ok {
		(*Server)(h).replicaFrame(c, rf, false)
	}
}

func (h *peerHandler) HandleClose(c transport.Conn, err error) {}
