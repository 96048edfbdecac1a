package replica

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Status is how the group stands on this node.
type Status struct {
	Service string
	ID      uint64
	// Role is "voter", "learner" or "" (not in the group yet, or removed).
	Role    string
	Leader  string
	Leading bool
	Term    uint64
	Commit  uint64
	Applied uint64
	// LeaderCommit is the leader's commit index as its last hello told
	// this follower; Commit is only what this node holds of it.
	LeaderCommit uint64
	LogFirst     uint64 // the oldest entry still in the log here
	LogLast      uint64
	// SnapshotIndex is the index of the newest snapshot here, taken or
	// installed.
	SnapshotIndex      uint64
	SnapshotsInstalled uint64
	Voters, Learners   []string
	// NotReady says why the node does not serve the service, empty when
	// it does.
	NotReady      string
	NotReadySince time.Time
	// Stopped is set when apply stopped at an entry it could not apply.
	Stopped bool
	// DataDir is where the state is stored, empty in memory.
	DataDir string
	// StoreFailed says why the node cannot store its state, empty while
	// it can.
	StoreFailed string
	// Removed says how the node learnt that a configuration change took
	// it out of the group, empty while it is a member.
	Removed string
	// Peers is, on the leader, how far raft has replicated its log to
	// each member of the group, this node included; empty elsewhere.
	Peers []Peer
}

// Peer is one member of the group as the leader's raft progress tracks
// it.
type Peer struct {
	Node    string
	Learner bool
	// Match is the highest index known to be in the member's log.
	Match uint64
	// State is raft's: "replicate" (appends stream), "probe" (finding
	// where its log matches) or "snapshot" (a snapshot is on its way).
	State string
	// Active: the member answered within the last election timeout.
	Active bool
}

// refreshPeers records the leader's view of every member's log, once a
// tick, for Status. Called with raftMu held.
func (g *Group) refreshPeers() {
	var peers []Peer
	if g.leading {
		g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			peers = append(peers, Peer{Node: g.nameOf(id), Learner: pr.IsLearner, Match: pr.Match, State: strings.ToLower(strings.TrimPrefix(pr.State.String(), "State")), Active: pr.RecentActive || id == g.id})
		})
		slices.SortFunc(peers, func(a, b Peer) int { return strings.Compare(a.Node, b.Node) })
	}
	g.mu.Lock()
	g.st.Peers = peers
	g.mu.Unlock()
}

// maxApplyLag is how far apply may trail the commit index (this node's,
// or the leader's) before the node stops serving reads: beyond it, it is
// catching up.
const maxApplyLag = 1000

// stallAfter is how long a follower may take to apply an index the leader
// told it was committed before it reports catching up: one that hears the
// leader's heartbeats but receives none of its appends, or cannot apply
// them, must not keep serving reads that miss acknowledged writes.
const stallAfter = 2 * time.Second

// lagWatch follows how far a follower trails the leader it hears.
type lagWatch struct {
	leader       uint64 // the leader's raft ID
	leaderCommit uint64
	// target is an index the leader reported committed while this node
	// had applied all the earlier target; since is when.
	target uint64
	since  time.Time
}

// leaderCommitted takes the commit index the leader reported. Called with
// raftMu held.
func (g *Group) leaderCommitted(leader, commit uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lag.leader != leader {
		g.lag = lagWatch{leader: leader}
	}
	g.lag.leaderCommit = commit
	if g.applied.Load() >= g.lag.target {
		g.lag.target, g.lag.since = commit, time.Now()
	}
}

// stalledLocked returns why this follower trails the leader too far, or
// nil. Called with mu held.
func (g *Group) stalledLocked(st *Status) error {
	if st.Leading || st.Leader == "" || g.lag.leader == 0 {
		return nil
	}
	switch {
	case g.lag.leaderCommit > st.Applied+maxApplyLag:
		return fmt.Errorf("catching up: applied %d of the leader's %d", st.Applied, g.lag.leaderCommit)
	case g.lag.target > st.Applied && time.Since(g.lag.since) > stallAfter:
		return fmt.Errorf("catching up: applied %d; the leader had committed %d %s ago",
			st.Applied, g.lag.target, time.Since(g.lag.since).Round(time.Millisecond))
	}
	return nil
}

// refreshStatus publishes raft's state. Called with raftMu held.
func (g *Group) refreshStatus() {
	st := g.rn.BasicStatus()
	first, _ := g.storage.FirstIndex()
	last, _ := g.storage.LastIndex()
	role := ""
	switch {
	case g.out != nil:
		// Out of the group, whatever the configuration it holds says.
	case g.isVoter(g.id):
		role = "voter"
	case g.isLearner(g.id):
		role = "learner"
	}
	g.canLead.Store(role == "voter" && !g.cfg.TieBreaker)
	// A follower may hear from a leader before it knows the leader's name
	// (the configuration that names it comes in the same append): it is
	// published once known.
	if g.lead != 0 && !g.leading {
		if name := g.nameOf(g.lead); name != "" && name != g.publishedLeader() {
			g.mu.Lock()
			g.st.Leader = name
			g.mu.Unlock()
			g.emit(func() { g.cfg.Host.LeaderChanged(name, false) })
		}
	}
	g.mu.Lock()
	g.st.Term = st.HardState.GetTerm()
	g.st.Commit = st.HardState.GetCommit()
	g.st.LogFirst, g.st.LogLast = first, last
	g.st.Role = role
	g.st.LeaderCommit = g.lag.leaderCommit
	if g.leading {
		g.lag = lagWatch{}
		g.st.LeaderCommit = 0
	}
	cur := g.st
	cur.Applied = g.applied.Load()
	g.setServingLocked(g.notReadyLocked(&cur) == nil)
	g.mu.Unlock()
}

// publishedLeader is the leader's name as Status reports it.
func (g *Group) publishedLeader() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st.Leader
}

// Status reports the group's state on this node.
func (g *Group) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	st.Voters = append([]string(nil), st.Voters...)
	st.Learners = append([]string(nil), st.Learners...)
	st.Peers = slices.Clone(st.Peers)
	st.Applied = g.applied.Load()
	// A leader applies a committed write before its Ready is done, and
	// so before the commit index here is refreshed.
	st.Commit = max(st.Commit, st.Applied)
	st.Stopped = g.stopErr != nil
	if err := g.notReadyLocked(&st); err != nil {
		if g.notReadySince.IsZero() {
			g.notReadySince = time.Now()
		}
		st.NotReady, st.NotReadySince = err.Error(), g.notReadySince
	} else {
		g.notReadySince = time.Time{}
	}
	return st
}

// Ready returns why this node does not serve the service, nil when it
// does: it is a voter that knows a leader and has applied about what is
// committed, it has not stopped applying, and it is not draining.
func (g *Group) Ready() error {
	st := g.Status()
	if st.NotReady == "" {
		return nil
	}
	return errors.New(st.NotReady)
}

func (g *Group) notReadyLocked(st *Status) error {
	switch {
	case g.stopErr != nil:
		return g.stopErr
	case st.Removed != "":
		return errors.New(st.Removed)
	case st.StoreFailed != "":
		return errors.New(st.StoreFailed)
	case g.draining:
		return errors.New("draining: the node is shutting down")
	case st.Role == "" && len(st.Voters) == 0:
		return errors.New("joining: waiting for the group to form")
	case st.Role == "":
		return errors.New("joining: waiting for the leader to add this node")
	case st.Role == "learner":
		return fmt.Errorf("catching up as a learner: applied %d of %d", st.Applied, st.Commit)
	case st.Leader == "":
		return errors.New("no leader: this node cannot reach a quorum of the voters")
	case st.Commit > st.Applied+maxApplyLag:
		return fmt.Errorf("catching up: applied %d of %d", st.Applied, st.Commit)
	}
	return g.stalledLocked(st)
}
