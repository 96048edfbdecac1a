package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ffgen/ffgen/runtime/internal/replica"
)

// Replication of scatter writes. A service with a scatter method is
// replicated among the nodes that serve it by a raft group
// (runtime/internal/replica, on etcd's raft): a write is acknowledged only
// once a majority of the group's voters holds it, every node applies every
// write in log order, and an operation ID's result is replicated state, so
// a retried write never runs twice. Design and guarantees:
// docs/ARCHITECTURE.md, "Replication". The files: replication.go (the
// user's configuration and what the node reports), server_replicated.go (the
// server's side of the group: writes, reads, apply).

// ReplicationConfig configures the raft groups of replicated services.
type ReplicationConfig struct {
	// Voters names the nodes that form each replicated service's group
	// when the cluster starts for the first time, as etcd's initial
	// cluster does: every node is given the same list, and the group
	// forms once each listed node has started. A node not listed joins a
	// formed group as a learner and becomes a voter once it has caught
	// up. A cluster node (ServerConfig.Node set) that registers a
	// replicated service needs it; a server outside any cluster
	// replicates to nobody.
	Voters []string
	// TieBreaker makes this node a voter that never leads: placed in a
	// third location, in a failure group that clients do not route to,
	// it lets a cluster of two failure groups keep taking writes when
	// either group is lost.
	TieBreaker bool
	// SnapshotEvery is about how many writes the log grows by before a
	// node snapshots a service that implements StateTransfer and drops
	// the log behind it (each node varies it by up to an eighth, so that
	// the nodes do not all pause for a snapshot at the same write).
	// Default 100000.
	SnapshotEvery int
	// RememberWrites is how many of the newest writes' operation IDs and
	// results each service keeps, as replicated state: a retry of one of
	// them, on any node, gets the recorded result instead of running
	// again. Default 100000.
	RememberWrites int
	// ElectionTimeout is how long followers wait without hearing from the
	// leader before they elect another. Default: three quarters of the
	// heartbeat timeout, so that by the time a client fails over from a
	// frozen leader the voters no longer keep its lease, and the node the
	// client reaches wins the election it stands for at once.
	ElectionTimeout time.Duration
	// MaxSnapshotBytes bounds a snapshot a peer may send. Default 1 GiB.
	MaxSnapshotBytes int
	// Cluster names the cluster, as etcd's initial cluster token does: it
	// is stored in each data directory (ServerConfig.DataDir), and a node
	// refuses a directory of another cluster. Default "ffgen".
	Cluster string
	// UnsafeNoFsync acknowledges writes once the operating system has
	// them, without waiting for the disk: faster, but a power cut or an
	// operating-system crash of a majority of the voters at once can
	// lose acknowledged writes, and a node's file may be left corrupt
	// (found at start: the node then rejoins from its peers). A process
	// that crashes loses nothing either way. Only with DataDir.
	UnsafeNoFsync bool
}

func (c ReplicationConfig) withDefaults(s Settings) ReplicationConfig {
	if c.SnapshotEvery <= 0 {
		c.SnapshotEvery = 100000
	}
	if c.RememberWrites <= 0 {
		c.RememberWrites = 100000
	}
	if c.ElectionTimeout <= 0 {
		hb := s.HeartbeatTimeout
		if hb <= 0 {
			hb = DefaultHeartbeatTimeout
		}
		c.ElectionTimeout = hb * 3 / 4
	}
	if c.MaxSnapshotBytes <= 0 {
		c.MaxSnapshotBytes = 1 << 30
	}
	if c.Cluster == "" {
		c.Cluster = "ffgen"
	}
	return c
}

// raftTicks is how many raft ticks an election timeout lasts; a leader
// sends heartbeats every raftHeartbeatTicks.
const (
	raftTicks          = 10
	raftHeartbeatTicks = 3
)

// StateTransfer is implemented by a replicated service whose state can be
// copied: its nodes then snapshot it every SnapshotEvery writes and drop
// the log behind, and a node that joins or falls behind gets a snapshot
// instead of the whole log. Without it every node keeps the whole log, so
// that a new node can replay it from the first write.
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
	// Ready is false while the node does not serve the service: it is
	// joining or catching up, knows no leader, stopped applying, or is
	// shutting down. NotReady says which.
	Ready         bool      `json:"ready"`
	NotReady      string    `json:"not_ready,omitempty"`
	NotReadySince time.Time `json:"not_ready_since,omitzero"`
	// Role is "voter", "learner", or "" while the node is not in the group.
	Role       string `json:"role"`
	TieBreaker bool   `json:"tie_breaker,omitempty"`
	Leader     string `json:"leader,omitempty"`
	Leading    bool   `json:"leading"`
	Term       uint64 `json:"term"`
	Commit     uint64 `json:"commit"`
	Applied    uint64 `json:"applied"`
	// LeaderCommit is, on a follower, the leader's commit index as the
	// leader last told it: Commit is only what the follower holds of it.
	LeaderCommit uint64 `json:"leader_commit,omitempty"`
	LogFirst     uint64 `json:"log_first"` // the oldest entry a follower can still get from here
	LogLast      uint64 `json:"log_last"`
	// Stopped is true once the node met a write it cannot apply (it does
	// not decode, its method is not served here, its handler panicked):
	// it applies nothing after it, and NotReady names the write.
	Stopped bool `json:"stopped"`
	// Removed is true once the node learnt that its group took it out
	// (RemoveReplica, while it was down or cut off): it serves nothing of
	// the service until it is restarted, and then joins as a new member,
	// its state on disk set aside. NotReady says how it learnt it.
	Removed            bool     `json:"removed,omitempty"`
	SnapshotIndex      uint64   `json:"snapshot_index"`
	SnapshotsInstalled uint64   `json:"snapshots_installed"`
	Voters             []string `json:"voters"`
	Learners           []string `json:"learners,omitempty"`
	// DataDir is where the service's raft state is stored (see
	// ServerConfig.DataDir), empty while it is in memory only.
	DataDir string `json:"data_dir,omitempty"`
	// Peers is, on the leader, every member of the group with how far
	// the leader's log is replicated to it (raft's progress, refreshed
	// every tick); empty on the other nodes, which report only their own
	// Applied.
	Peers []ReplicaPeer `json:"peers,omitempty"`
}

// ReplicaPeer is one member of a replicated service's group as its leader
// sees it.
type ReplicaPeer struct {
	Node    string `json:"node"`
	Learner bool   `json:"learner,omitempty"`
	// Match is the highest log index known to be on the member; Behind
	// is how many entries of the leader's log it lacks.
	Match  uint64 `json:"match"`
	Behind uint64 `json:"behind"`
	// State is raft's: "replicate", "probe" or "snapshot".
	State string `json:"state"`
	// Active: it answered the leader within the last election timeout.
	Active bool `json:"active"`
}

// Replication reports every replicated service's state on this node.
func (s *Server) Replication() []ReplicaStatus {
	s.mu.Lock()
	reps := make([]*replicated, 0, len(s.replicas))
	for _, r := range s.replicas {
		reps = append(reps, r)
	}
	s.mu.Unlock()
	out := make([]ReplicaStatus, 0, len(reps))
	for _, r := range reps {
		st := r.g.Status()
		out = append(out, ReplicaStatus{
			Service: st.Service, Ready: st.NotReady == "", NotReady: st.NotReady, NotReadySince: st.NotReadySince,
			Role: st.Role, TieBreaker: r.cfg.TieBreaker, Leader: st.Leader, Leading: st.Leading,
			Term: st.Term, Commit: st.Commit, Applied: st.Applied, LeaderCommit: st.LeaderCommit, LogFirst: st.LogFirst, LogLast: st.LogLast,
			Stopped: st.Stopped, Removed: st.Removed != "", SnapshotIndex: st.SnapshotIndex, SnapshotsInstalled: st.SnapshotsInstalled,
			Voters: st.Voters, Learners: st.Learners, DataDir: st.DataDir, Peers: peersOf(st),
		})
	}
	slices.SortFunc(out, func(a, b ReplicaStatus) int {
		if a.Service < b.Service {
			return -1
		}
		return 1
	})
	return out
}

// peersOf turns the leader's view of its group into ReplicaPeers.
func peersOf(st replica.Status) []ReplicaPeer {
	if len(st.Peers) == 0 {
		return nil
	}
	out := make([]ReplicaPeer, len(st.Peers))
	for i, p := range st.Peers {
		out[i] = ReplicaPeer{Node: p.Node, Learner: p.Learner, Match: p.Match, State: p.State, Active: p.Active}
		if st.LogLast > p.Match {
			out[i].Behind = st.LogLast - p.Match
		}
	}
	return out
}

// Ready reports whether every replicated service on this node is served,
// and if not, why: for readiness probes.
func (s *Server) Ready() error {
	for _, st := range s.Replication() {
		if !st.Ready {
			return fmt.Errorf("%s: %s", st.Service, st.NotReady)
		}
	}
	return nil
}

// RemoveReplica takes node out of service's raft group: an operator's
// decision that the node is gone for good (a node that stops gracefully
// leaves by itself). It must be asked of the group's leader, and returns
// once the leader has applied the change (a node removed already is not
// an error; if ctx ends first, the change may still apply). A removed
// node that runs again, or was only cut off, is told so by the members:
// it serves nothing of the service until it is restarted, and then joins
// as a new member (ReplicaStatus.Removed).
func (s *Server) RemoveReplica(ctx context.Context, service, node string) error {
	s.mu.Lock()
	r := s.replicas[service]
	s.mu.Unlock()
	if r == nil {
		return fmt.Errorf("ffgen: %s: %w", service, ErrNotReplicated)
	}
	if err := r.g.Remove(ctx, node); err != nil {
		return fmt.Errorf("ffgen: remove %s from %s: %w", node, service, err)
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
	s.members.Store(&m)
}

// membership is the membership, read without the server's lock.
func (s *Server) membership() Membership {
	if m := s.members.Load(); m != nil {
		return *m
	}
	return nil
}

// ErrNotReplicated is returned for a service that is not replicated on the
// node (not registered, or without a scatter method).
var ErrNotReplicated = errors.New("not a replicated service on this node")

// errNoVoters refuses a replicated service on a cluster node that was not
// told which nodes form its group.
var errNoVoters = errors.New("a replicated service on a cluster node needs ReplicationConfig.Voters: the nodes that form its raft group when the cluster first starts")
