package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// How the group forms and changes. The voters are configuration, never
// liveness: they change only through raft's configuration changes.
//
//   - Forming: when a cluster starts for the first time, each node listed
//     in Config.Voters says hello to its peers; once a node has heard from
//     every listed voter and none of them belongs to a formed group, it
//     bootstraps with exactly those nodes as voters. All of them arrive at
//     the same configuration, since each node's raft ID is its own.
//   - Joining: a node that finds a formed group (a hello from a member)
//     keeps saying hello; the leader adds it as a learner, and promotes it
//     to voter once it has caught up. A node restarted empty is a new
//     member (a new raft ID): the leader removes its earlier self first,
//     once that has gone silent (silent).
//   - Leaving: a graceful stop hands leadership over and removes the node
//     (Leave); an operator may remove a dead node (Remove).
//   - Removed: a raft ID a committed change took out of the group is never
//     a member again. A node can miss its own removal (it was down or cut
//     off) and still believe it is a member: it would ask to join no more
//     and wait for a leader for ever. So a member that has not heard from a
//     leader for an election timeout says hello, and a member that applied
//     the removal answers any message
//     from that ID saying so (tellRemoved). The node then stops, says so,
//     and leaves a mark in its data directory: restarted, it sets its state
//     aside and joins as a new member (outOfGroup, restart.go). It cannot
//     rejoin in place: the service holds the state of the old log, which
//     a new member's log or snapshot would be applied on top of.

// helloEvery is how often a node that has not joined says hello, and how
// often the leader looks at who wants to join.
const helloEvery = 250 * time.Millisecond

// helloFresh is how long a hello counts.
const helloFresh = 3 * time.Second

// confTimeout is how long a configuration change may take before the
// leader tries again.
const confTimeout = 5 * time.Second

// alone bootstraps a node that needs nobody: outside any cluster, or the
// only voter listed.
func (g *Group) alone() {
	if len(g.cfg.Voters) != 1 || g.cfg.Voters[0] != g.cfg.Node {
		return
	}
	if !g.restored {
		g.bootstrap([]raft.Peer{{ID: g.id, Context: []byte(g.cfg.Node)}})
	}
	// raft campaigns only once the configuration is applied.
	g.handleReady()
	if g.isVoter(g.id) && len(g.conf.GetVoters()) == 1 {
		g.rn.Campaign()
		g.handleReady()
	}
}

func (g *Group) every(d time.Duration) bool {
	n := max(1, int(d/g.cfg.Tick))
	return g.ticks%n == 0
}

// tick does what time drives besides raft's own timers.
func (g *Group) tick() {
	g.ticks++
	g.retryRead()
	if !g.campaignUntil.IsZero() {
		if g.leading || time.Now().After(g.campaignUntil) {
			g.campaignUntil = time.Time{}
		} else {
			g.campaign()
		}
	}
	if !g.every(helloEvery) {
		return
	}
	if !g.member() {
		if !g.left {
			g.sayHello("")
			g.tryBootstrap()
		}
		return
	}
	switch {
	case g.leading:
		g.manageMembers()
		// The followers learn from it how far the leader has committed.
		g.sayHello("")
	case g.left:
	case g.lead == 0 || g.ticks-g.lastFrom[g.lead] > g.cfg.ElectionTicks:
		// A member the group took out while it was away waits for a
		// leader for ever, and a learner keeps the leader it knew (it
		// stands for nothing, and sends raft nothing unasked): its
		// hello is what a member answers with the news.
		g.sayHello("")
	}
}

func (g *Group) helloMsg() hello {
	h := hello{name: g.cfg.Node, id: g.id, member: g.member()}
	if g.leading {
		st := g.rn.BasicStatus()
		h.term, h.commit = st.HardState.GetTerm(), st.HardState.GetCommit()
	}
	return h
}

// sayHello sends this node's hello to one peer, or to every peer.
func (g *Group) sayHello(to string) {
	h := g.helloMsg()
	b := h.marshal()
	if to != "" {
		g.cfg.Host.Send(to, KindHello, b)
		return
	}
	for _, p := range g.cfg.Host.Peers() {
		g.cfg.Host.Send(p, KindHello, b)
	}
}

func (g *Group) onHello(h hello) {
	if h.removed != 0 {
		switch {
		case h.removed != g.id:
		case g.leaving || g.left:
			g.left = true // the removal Leave asked for
		default:
			g.outOfGroup(fmt.Sprintf("%s applied a configuration change that took it out", h.name))
		}
		return
	}
	if !g.isVoter(h.id) && !g.isLearner(h.id) && g.tellRemoved(h.name, h.id) {
		return
	}
	g.heard[h.name] = heardHello{hello: h, at: time.Now(), tick: g.ticks}
	g.mu.Lock()
	if g.names[h.id] == "" {
		g.names[h.id] = h.name
	}
	g.mu.Unlock()
	if h.term != 0 && h.id == g.lead && !g.leading && h.term == g.rn.BasicStatus().HardState.GetTerm() {
		g.leaderCommitted(h.id, h.commit)
	}
	if g.member() && !h.member {
		// Tell a node that has not joined that the group exists.
		g.sayHello(h.name)
		if g.leading {
			g.manageMembers()
		}
	}
	if !g.member() {
		g.tryBootstrap()
	}
}

// tryBootstrap forms the group once every listed voter is known and none
// belongs to a formed group.
func (g *Group) tryBootstrap() {
	if g.member() || !slices.Contains(g.cfg.Voters, g.cfg.Node) {
		return
	}
	if last, _ := g.storage.LastIndex(); last > 0 {
		return // a leader has reached this node: it joins that group
	}
	now := time.Now()
	for _, h := range g.heard {
		if h.member && now.Sub(h.at) < helloFresh {
			return
		}
	}
	peers := []raft.Peer{{ID: g.id, Context: []byte(g.cfg.Node)}}
	for _, v := range g.cfg.Voters {
		if v == g.cfg.Node {
			continue
		}
		h, ok := g.heard[v]
		if !ok || now.Sub(h.at) >= helloFresh {
			return
		}
		peers = append(peers, raft.Peer{ID: h.id, Context: []byte(v)})
	}
	g.log.Info("ffgen: forming the replicated group", "voters", g.cfg.Voters)
	g.bootstrap(peers)
}

func (g *Group) bootstrap(peers []raft.Peer) {
	if err := g.rn.Bootstrap(peers); err != nil {
		g.log.Error("ffgen: could not form the replicated group", "err", err)
	}
}

// noteRemoved records the raft IDs that the committed configuration
// change from old to cur took out of the group: as raft applies it, so
// that a removed ID is never taken for one that may join (manageMembers)
// nor a removal for one still to come (removing). Called with raftMu held.
func (g *Group) noteRemoved(old, cur *pb.ConfState) {
	in := confMembers(cur)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range confMembers(old) {
		if !slices.Contains(in, id) {
			g.removed[id] = true
		}
	}
}

// confMembers lists every raft ID a configuration names, a joint one's
// outgoing voters and incoming learners included.
func confMembers(cs *pb.ConfState) []uint64 {
	var ids []uint64
	for _, l := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		ids = append(ids, l...)
	}
	return ids
}

// isRemoved reports whether a configuration change applied here took raft
// ID id out of the group.
func (g *Group) isRemoved(id uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.removed[id]
}

// tellRemoved tells the node called name that its raft ID id is out of
// the group, if a configuration change applied here took it out, at most
// once a hello interval; it reports whether id is out. Called with raftMu
// held.
func (g *Group) tellRemoved(name string, id uint64) bool {
	out := g.isRemoved(id)
	if !out || name == "" {
		return out
	}
	if last, ok := g.told[id]; ok && g.ticks-last < max(1, int(helloEvery/g.cfg.Tick)) {
		return true
	}
	g.told[id] = g.ticks
	h := g.helloMsg()
	h.removed = id
	g.cfg.Host.Send(name, KindHello, h.marshal())
	return true
}

// outOfGroup takes this node out of service once it knows that a
// committed configuration change removed it: it serves nothing of the
// service, drives raft no more, and marks its data directory, so that a
// restart sets the state aside and joins as a new member. Called with
// raftMu held.
func (g *Group) outOfGroup(how string) {
	if g.out != nil {
		return
	}
	restart := "restart the node to rejoin as a new member"
	if g.disk != nil {
		if err := markRemoved(g.cfg.Dir, g.id); err != nil {
			// Without the mark a restart comes back as the removed
			// member, is told again, and marks then.
			g.log.Error("ffgen: could not mark the data directory of a removed node", "dir", g.cfg.Dir, "err", err)
		}
		restart += " (its state on disk is set aside then)"
	}
	g.out = fmt.Errorf("removed from the group (raft ID %x): %s; %s", g.id, how, restart)
	g.log.Error("ffgen: this node is no longer a member of the replicated group: it serves nothing of the service until it is restarted", "id", g.id, "how", how)
	g.forgetLeader(func(st *Status) { st.Removed = g.out.Error() })
}

// manageMembers runs on the leader: it adds the nodes that asked to join
// as learners (removing a node's earlier self first), promotes caught-up
// learners, and hands leadership over if this node only breaks ties. One
// change at a time, as raft requires.
func (g *Group) manageMembers() {
	if g.cfg.TieBreaker {
		g.handOver()
	}
	if !g.confBusy.IsZero() && time.Since(g.confBusy) < confTimeout {
		return
	}
	now := time.Now()
	names := g.confNames()
	for name, h := range g.heard {
		if h.member || now.Sub(h.at) >= helloFresh || g.isVoter(h.id) || g.isLearner(h.id) || g.isRemoved(h.id) {
			// A removed ID is never a member again: the hello is one it
			// sent before it was removed (before the group formed).
			continue
		}
		if old, ok := names[name]; ok && old != h.id {
			if !g.silent(old, h.tick) {
				// A hello can be older than the member it would replace:
				// one the node sent before its data was lost, read late.
				// A member that still talks is the node's current self.
				continue
			}
			g.log.Info("ffgen: removing a node's earlier self", "node", name)
			g.proposeConf(pb.ConfChangeType_ConfChangeRemoveNode, old, name)
			return
		}
		g.log.Info("ffgen: adding a node as a learner", "node", name)
		g.proposeConf(pb.ConfChangeType_ConfChangeAddLearnerNode, h.id, name)
		return
	}
	st := g.rn.BasicStatus()
	commit := st.HardState.GetCommit()
	var promote uint64
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.IsLearner && pr.Match >= commit && promote == 0 {
			promote = id
		}
	})
	if promote != 0 {
		name := g.nameOf(promote)
		g.log.Info("ffgen: promoting a caught-up learner to voter", "node", name)
		g.proposeConf(pb.ConfChangeType_ConfChangeAddNode, promote, name)
	}
}

// silent reports whether member id has sent this leader nothing for two
// election timeouts, counted from its election at the earliest, and
// nothing since a hello heard in tick helloTick. Only then may a hello
// from another raft ID under the member's name replace it: a node that
// lost its data says hello under a new ID, but so, read late, does a
// hello its earlier self sent before the member existed, and removing a
// member that is alive for it leaves the node out for good (it believes
// it is a member and asks to join no more). A member that answers the
// leader is alive; one that lost its data sends nothing under its old ID
// again. Counted in this node's ticks, so that a freeze of the leader
// itself is not taken for the member's silence.
func (g *Group) silent(id uint64, helloTick int) bool {
	last := max(g.lastFrom[id], g.leadSince)
	return helloTick > last && g.ticks-last > 2*g.cfg.ElectionTicks
}

func (g *Group) proposeConf(t pb.ConfChangeType, id uint64, name string) error {
	cc := &pb.ConfChange{Type: t.Enum(), NodeId: proto.Uint64(id), Context: []byte(name)}
	if err := g.rn.ProposeConfChange(cc); err != nil {
		return err
	}
	g.confBusy = time.Now()
	return nil
}

// confNames maps the configuration's members' names to their IDs.
func (g *Group) confNames() map[string]uint64 {
	out := make(map[string]uint64)
	for _, id := range append(slices.Clone(g.conf.GetVoters()), g.conf.GetLearners()...) {
		if n := g.nameOf(id); n != "" {
			out[n] = id
		}
	}
	return out
}

// handOver passes leadership to the voter furthest along: a tie-breaker
// votes but does not lead.
func (g *Group) handOver() {
	var best uint64
	var bestMatch uint64
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != g.id && !pr.IsLearner && (best == 0 || pr.Match > bestMatch) {
			best, bestMatch = id, pr.Match
		}
	})
	if best != 0 {
		g.rn.TransferLeader(best)
	}
}

// updateMembers publishes the configuration in the status. Called on the
// raftMu held after the configuration changed.
func (g *Group) updateMembers() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.Voters = g.st.Voters[:0]
	for _, id := range g.conf.GetVoters() {
		g.st.Voters = append(g.st.Voters, g.names[id])
	}
	g.st.Learners = g.st.Learners[:0]
	for _, id := range g.conf.GetLearners() {
		g.st.Learners = append(g.st.Learners, g.names[id])
	}
	slices.Sort(g.st.Voters)
	slices.Sort(g.st.Learners)
}

// Leave takes this node out of the group before it stops: it hands
// leadership over, then asks for its removal, and waits until ctx ends
// for the removal to apply. A node that rejoins later is a new member.
func (g *Group) Leave(ctx context.Context) error {
	if err := g.StepDown(ctx); err != nil {
		return err
	}
	if st := g.Status(); st.Leading {
		return nil // the last voter stays: nobody to hand over to
	}
	for {
		done := make(chan bool, 1)
		g.do(func() {
			// left: a member that applied the removal said so before
			// this node applied it.
			in := !g.left && (g.isVoter(g.id) || g.isLearner(g.id))
			// The last voter stays: a group with none cannot exist (and
			// raft refuses it), and it holds the state alone.
			last := g.isVoter(g.id) && len(g.conf.GetVoters()) == 1
			if last {
				in = false
			}
			if in && g.lead != 0 {
				g.leaving = true
				cc := &pb.ConfChange{Type: pb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(g.id), Context: []byte(g.cfg.Node)}
				g.rn.ProposeConfChange(cc)
			}
			done <- in
		})
		select {
		case in := <-done:
			if !in {
				g.do(func() { g.left = true }) // no hello asks to be added again
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stopc:
			return ErrStopped
		}
		if err := g.sleep(ctx, 10*g.cfg.Tick); err != nil {
			return fmt.Errorf("leave the group: %w", err)
		}
	}
}

// StepDown hands leadership over to another voter, if this node leads
// and there is one, and waits until ctx ends for it to take over. A node
// that stops with its state on disk steps down rather than leaving: it
// comes back as the same member.
func (g *Group) StepDown(ctx context.Context) error {
	for {
		_, leading := g.Leader()
		if !leading {
			return nil
		}
		if st := g.Status(); len(st.Voters) <= 1 {
			return nil // nobody to hand over to
		}
		g.do(g.handOver)
		if err := g.sleep(ctx, 4*g.cfg.Tick); err != nil {
			return fmt.Errorf("hand leadership over: %w", err)
		}
	}
}

func (g *Group) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.stopc:
		return ErrStopped
	}
}

// Remove takes a node out of the group: an operator's decision that it is
// gone for good. Only the leader can. It returns once the leader has
// applied the change, proposing it again while it is not: raft drops a
// configuration change proposed while another is under way (a learner's
// promotion, say), and one proposed by a leader that then lost its place
// may never commit. A node removed already is not an error, so that the
// operator may ask again (of the new leader, say) until it succeeds.
func (g *Group) Remove(ctx context.Context, node string) error {
	var id uint64
	for {
		errc := make(chan error, 1)
		g.do(func() { errc <- g.removing(node, &id) })
		select {
		case err := <-errc:
			if err != errRemovalPending {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("the removal of %s is not applied yet: %w", node, ctx.Err())
		case <-g.stopc:
			return ErrStopped
		}
		if err := g.sleep(ctx, 4*g.cfg.Tick); err != nil {
			return fmt.Errorf("the removal of %s is not applied yet: %w", node, err)
		}
	}
}

var errRemovalPending = errors.New("removal pending")

// removing moves node's removal on by one step: nil once its raft ID (id,
// found at the first step) is out of the configuration, errRemovalPending
// while it is not, having proposed it if no configuration change is
// under way. Called with raftMu held.
func (g *Group) removing(node string, id *uint64) error {
	if !g.leading {
		ask := "ask again once the group has one"
		if l := g.nameOf(g.lead); l != "" {
			ask = "ask " + l
		}
		if *id != 0 {
			return fmt.Errorf("%w any more, while the removal was under way (it may apply all the same): %s", ErrNotLeader, ask)
		}
		return fmt.Errorf("%w: %s", ErrNotLeader, ask)
	}
	if *id == 0 {
		cur, ok := g.confNames()[node]
		switch {
		case !ok && g.removedName(node):
			return nil
		case !ok:
			return fmt.Errorf("%s is not a member of the group", node)
		case cur == g.id:
			return errors.New("the leader cannot remove itself: let it leave")
		}
		*id = cur
	}
	if !g.isVoter(*id) && !g.isLearner(*id) {
		return nil
	}
	// raft drops without a word a change proposed while another one is
	// pending, or before a new leader has applied its predecessors'
	// entries: proposed again an election timeout after the last change
	// began (once ours is pending, raft drops the copies). One raft
	// refuses outright, during a leadership transfer, waits the same.
	if g.confBusy.IsZero() || time.Since(g.confBusy) >= time.Duration(g.cfg.ElectionTicks)*g.cfg.Tick {
		if err := g.proposeConf(pb.ConfChangeType_ConfChangeRemoveNode, *id, node); err != nil {
			g.log.Debug("ffgen: raft refused a removal; it is proposed again", "node", node, "err", err)
		}
	}
	return errRemovalPending
}

// removedName reports whether a raft ID of node's was removed from the
// group.
func (g *Group) removedName(node string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.removed {
		if g.names[id] == node {
			return true
		}
	}
	return false
}
