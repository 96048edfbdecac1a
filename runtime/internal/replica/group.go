// Package replica replicates a service's writes with etcd's raft: one raft
// group per replicated service, driven the way etcd's server drives it.
// raft decides; this package persists what a Ready hands over, sends its
// messages over the node's transport, applies committed entries in order
// through the Host, and keeps the operation-ID table that makes writes
// exactly once.
//
// The files: group.go (the Group and what the server calls), loop.go (the
// Ready loop: ticks, messages, proposals, on whichever goroutine brings
// them, and the events for the server), apply.go (the apply
// goroutine and snapshots), members.go (forming the group, joining,
// promotion, leaving), written.go (the operation-ID table), command.go,
// snapshot.go and wire.go (encodings), status.go (what the node reports),
// disk.go (the raft state on disk) and restart.go (starting from it, and
// living with a disk that fails).
package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/ffgen/ffgen/internal/frame"
)

// Host is what a group needs of the server it runs in.
type Host interface {
	// Apply runs a committed write. recorded is set when the write's
	// operation ID is in the table already: the handler must not run
	// again, and whoever waits for the write gets recorded. An error
	// means the write cannot be applied on this node (it does not decode,
	// its method is not served here, the handler panicked): the group
	// stops applying at that index.
	Apply(index uint64, cmd *Command, recorded *frame.Result) (frame.Result, error)
	// SnapshotState encodes the service's state; ok is false when the
	// service cannot (it does not implement StateTransfer).
	SnapshotState() (state []byte, ok bool, err error)
	// RestoreState replaces the service's state.
	RestoreState(state []byte) error
	// LeaderChanged reports the leader this node knows, "" for none.
	LeaderChanged(leader string, leading bool)
	// CandidacyRefused reports that the voters refused the candidacy a
	// client asked for (Campaign): their logs are ahead of this node's,
	// so it cannot win before a leader catches it up. by names the
	// voters that refused it, in the order they answered; each of them
	// can win where this node cannot.
	CandidacyRefused(by []string)
	// Dropped reports a proposal raft did not take: this node is not the
	// leader (any more).
	Dropped(opID [16]byte, why string)
	// Peers lists the other live nodes that serve the service.
	Peers() []string
	// Send sends a Replica frame to a peer; an error means it was not
	// queued. body is the group's again once Send returns (it encodes
	// the next message into it): the frame must be encoded or copied.
	Send(to string, kind uint8, body []byte) error
}

// Config configures a Group.
type Config struct {
	Service string
	Node    string // this node's name; empty for a server outside any cluster
	// Voters are the nodes that form the group when it starts for the
	// first time (etcd's initial cluster).
	Voters     []string
	TieBreaker bool // votes, never leads

	Tick           time.Duration // raft's tick
	ElectionTicks  int
	HeartbeatTicks int
	// SnapshotEvery is how many applied entries make a snapshot; 0 never
	// (the service cannot snapshot: its whole log is kept).
	SnapshotEvery uint64
	// KeepEntries is how many entries behind a snapshot stay in the log,
	// so that a follower a little behind catches up without a snapshot.
	KeepEntries     uint64
	RememberWrites  int // the operation-ID table's size
	MaxMessageBytes int // the largest split message a peer may send
	// Dir holds the group's raft state on disk (disk.go); empty keeps it
	// in memory, lost when the process ends.
	Dir string
	// Cluster names the cluster, so that a data directory of another
	// cluster is refused.
	Cluster string
	// NoSync skips the fsync before raft's state counts as stored.
	NoSync bool
	Logger *slog.Logger
	Host   Host

	wrapStore func(store) store // tests inject write errors through it
}

// ErrNotLeader is returned for what only the leader can do.
var ErrNotLeader = errors.New("not the leader")

// ErrStopped is returned once the group is stopped. A Host's Apply returns
// it for a write it could not apply because the node is closing: apply
// stops there without reporting the write as one that cannot be applied.
var ErrStopped = errors.New("replication stopped")

// Group is one service's raft group on this node.
type Group struct {
	cfg     Config
	id      uint64
	storage *raft.MemoryStorage // raft's view of the log, as in etcd's server
	disk    store               // nil in memory
	log     *slog.Logger

	// raftMu guards rn and the fields below it (loop.go).
	raftMu  sync.Mutex
	rn      *raft.RawNode
	conf    *pb.ConfState
	lead    uint64
	leading bool
	ticks   int
	heard   map[string]heardHello // by name
	// lastFrom is the tick each peer's last raft message arrived in, and
	// leadSince the tick this node last became leader: together they tell
	// whether a member is alive (members.go, silent).
	lastFrom  map[uint64]int
	leadSince int
	confBusy  time.Time // a configuration change is under way since
	// campaignUntil: a client failed over to this node; it keeps standing
	// for election until then.
	campaignUntil time.Time
	campaignedAt  int      // the tick of its last campaign
	refusedBy     []string // the voters that refused its last candidacy
	left          bool     // Leave took the node out: it asks to join no more
	leaving       bool     // Leave asked for this node's removal
	// out says why this node is a member no more, once it knows: raft is
	// driven no more (members.go, outOfGroup).
	out error
	// told is the tick each removed raft ID was last told it is out.
	told     map[uint64]int
	chunkSeq uint64
	encBuf   []byte // where send encodes a message, reused
	// restored: the node restarted from disk with a log, so it belongs to
	// a formed group even before it has applied the configuration.
	restored bool
	// handed is the index of the last entry handed to the apply
	// goroutine.
	handed uint64
	// commit is the commit index of the last Ready's hard state, once one
	// has said it (commitKnown).
	commit      uint64
	commitKnown bool
	// unanswered are the answers raft owes the leader for appends that
	// only told this follower of a newer commit index: not sent
	// (commitnotice.go).
	unanswered []noticeAnswer
	// diskErr is set while the node cannot store raft's state: raft is
	// not driven until a retry after diskFailedAt.
	diskErr      error
	diskFailedAt time.Time
	// diskFailing is set from a failed store until one succeeds.
	diskFailing bool

	// inMu guards the inbox: what goroutines hand raft.
	inMu    sync.Mutex
	inMsgs  []*pb.Message
	inSpare []*pb.Message // the array of the messages stepped last, for the next
	inProps []proposal
	inCtl   []func()
	// runWake hands the run goroutine what the goroutines that brought it
	// left, or, with a disk, all of it (loop.go).
	runWake chan struct{}
	// flushDue: Propose or Receive added to the inbox since the last Flush.
	flushDue atomic.Bool
	// frozen: raft is not driven, as in a process SIGSTOP stopped
	// (Freeze, for tests).
	frozen atomic.Bool

	// evMu guards the events for the server, which the event goroutine
	// delivers in order.
	evMu   sync.Mutex
	events []func()
	evWake chan struct{}

	// asmMu guards the split messages being gathered, by peer.
	asmMu sync.Mutex
	asm   map[string]*assembly

	// mu guards the following: what status and the server read.
	mu    sync.Mutex
	names map[uint64]string // raft ID → node name
	// removed are the raft IDs a committed configuration change took out
	// of the group, never members again: added as raft applies the change
	// and from an installed snapshot; a member tells a node under such an
	// ID that it is out (members.go).
	removed       map[uint64]bool
	st            Status
	stopErr       error     // set when apply stopped
	notReadySince time.Time // since when Ready has failed
	lag           lagWatch  // how far this follower trails the leader
	draining      bool
	readNext      *readRound            // the round new reads join (reads.go)
	readRounds    map[uint64]*readRound // rounds sent to raft, by request context
	readSeq       uint64
	readSent      uint64        // the newest round sent, while raft has not answered it (0: none)
	readSentAt    int           // the tick it was sent at
	appliedCh     chan struct{} // closed when applied moves; made only while someone waits (WaitApplied)
	servingCh     chan struct{} // closed and replaced when serving changes

	applied atomic.Uint64
	// serving caches Ready() == nil for the paths every read takes; it is
	// refreshed on every raft tick and Ready, and cleared at once when
	// apply stops or the node drains.
	serving atomic.Bool
	canLead atomic.Bool
	// leaderHeard is when a message from the leader last arrived (unix
	// nanoseconds), so that a write is not sent to a leader gone silent.
	leaderHeard atomic.Int64
	leadID      atomic.Uint64 // the leader's raft ID, for Receive

	// wmu guards written, which the apply goroutine changes and the
	// server reads when a write arrives. The apply goroutine reads it
	// without wmu: nothing else changes it.
	wmu     sync.Mutex
	written *written

	// The apply goroutine's queue: guarded by qmu.
	qmu        sync.Mutex
	queue      []applyItem
	queueSpare []applyItem // the array of the queue applied last, for the next

	qwake chan struct{}
	// The apply goroutine owns these.
	applyConf *pb.ConfState
	lastSnap  uint64
	nextSnap  uint64 // when the next snapshot is due
	confSnap  bool   // a configuration change was applied since the last snapshot
	// snapStoring is set while a snapshot is being stored on disk.
	snapStoring atomic.Bool

	stopc chan struct{}
	wg    sync.WaitGroup
}

type proposal struct {
	opID [16]byte
	data []byte
}

type heardHello struct {
	hello
	at   time.Time
	tick int // g.ticks when it arrived
}

// soloName names a server outside any cluster in its group.
const soloName = "local"

// New creates the group and starts its goroutines. With Config.Dir it
// restarts from what is stored there: the snapshot is restored into the
// service and the log after it applied again, with the node's raft ID.
func New(cfg Config) (*Group, error) {
	solo := cfg.Node == ""
	if solo {
		cfg.Node = soloName
		cfg.Voters = []string{soloName}
	}
	g := &Group{
		cfg:        cfg,
		storage:    raft.NewMemoryStorage(),
		log:        cfg.Logger.With("service", cfg.Service),
		conf:       &pb.ConfState{},
		heard:      make(map[string]heardHello),
		lastFrom:   make(map[uint64]int),
		evWake:     make(chan struct{}, 1),
		runWake:    make(chan struct{}, 1),
		asm:        make(map[string]*assembly),
		names:      make(map[uint64]string),
		removed:    make(map[uint64]bool),
		told:       make(map[uint64]int),
		readRounds: make(map[uint64]*readRound),
		servingCh:  make(chan struct{}),
		written:    newWritten(cfg.RememberWrites),
		qwake:      make(chan struct{}, 1),
		applyConf:  &pb.ConfState{},
		stopc:      make(chan struct{}),
	}
	g.nextSnap = snapshotInterval(cfg.SnapshotEvery)
	var sv *saved
	if cfg.Dir != "" {
		var err error
		if g.disk, sv, err = openStoreOfMember(cfg, g.log); err != nil {
			return nil, err
		}
		if cfg.wrapStore != nil {
			g.disk = cfg.wrapStore(g.disk)
		}
		g.id = sv.id
	} else {
		g.id = newID(cfg.Node)
	}
	g.names[g.id] = cfg.Node
	g.st = Status{Service: cfg.Service, ID: g.id, DataDir: cfg.Dir}
	applied := g.restore(sv)
	rn, err := raft.NewRawNode(g.raftConfig(applied))
	if err != nil {
		// Only a broken configuration fails here, which New's caller
		// builds, or a store that contradicts itself, which load refuses.
		panic(fmt.Sprintf("ffgen: raft: %v", err))
	}
	g.rn = rn
	g.notReadySince = time.Now()
	g.wg.Add(3)
	go g.run()
	go g.applyLoop()
	go g.eventLoop()
	return g, nil
}

func (g *Group) raftConfig(applied uint64) *raft.Config {
	return &raft.Config{
		ID:                        g.id,
		ElectionTick:              g.cfg.ElectionTicks,
		HeartbeatTick:             g.cfg.HeartbeatTicks,
		Storage:                   g.storage,
		Applied:                   applied,
		MaxSizePerMsg:             1 << 20,
		MaxInflightMsgs:           256,
		MaxUncommittedEntriesSize: 1 << 30,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		Logger:                    raftLogger{l: g.cfg.Logger, attrs: []any{"service", g.cfg.Service}},
	}
}

// newID makes a raft ID for this process: the name's hash mixed with
// randomness, so that a node restarted empty is a new member and can never
// vote with a promise its earlier self made.
func newID(name string) uint64 {
	var b [8]byte
	rand.Read(b[:])
	for {
		id := xxhash.Sum64String(name) ^ binary.LittleEndian.Uint64(b[:])
		if id != 0 {
			return id
		}
		rand.Read(b[:])
	}
}

// Freeze stops driving raft until Thaw, as SIGSTOP stops the process:
// no tick, no step, no Ready; what arrives waits in the inbox. The ticks
// it misses are lost, as a stopped process's ticker fires once when it
// runs again, so a leader thaws believing it still leads. For tests, with
// the network holding the node's frames.
func (g *Group) Freeze() { g.frozen.Store(true) }

// Thaw undoes Freeze.
func (g *Group) Thaw() {
	g.frozen.Store(false)
	g.wakeRun()
}

// Stop ends the group's goroutines. Waiting reads end with ErrStopped.
func (g *Group) Stop() {
	select {
	case <-g.stopc:
		return
	default:
		close(g.stopc)
	}
	g.wg.Wait()
	g.raftMu.Lock()
	if g.disk != nil {
		g.disk.close()
	}
	g.raftMu.Unlock()
	g.endReads()
}

// do runs f with raft at hand (raftMu held), on this goroutine or the
// one holding raftMu.
func (g *Group) do(f func()) {
	g.inMu.Lock()
	g.inCtl = append(g.inCtl, f)
	g.inMu.Unlock()
	g.kick()
}

// Propose hands a write to raft at the next Flush. Only the leader takes
// it; on any other node, or if raft drops it, the Host hears of it through
// Dropped.
func (g *Group) Propose(cmd *Command) {
	g.inMu.Lock()
	g.inProps = append(g.inProps, proposal{opID: cmd.OpID, data: cmd.Marshal(nil)})
	g.inMu.Unlock()
	g.flushDue.Store(true)
}

// Flush hands raft what Propose and Receive brought since the last Flush,
// on this goroutine unless another one holds raft. The server calls it
// where a connection's batch of frames ends, so that the writes and
// messages that arrived together are one step of raft: one Ready, one
// append to each follower, one answer from each, rather than one of each
// per frame.
func (g *Group) Flush() {
	if g.flushDue.Load() && g.flushDue.Swap(false) {
		g.kick()
	}
}

// Campaign makes this node stand for election at once, when a client
// failed over to it. PreVote and CheckQuorum keep it from deposing a
// leader the voters still hear from.
//
// It keeps standing, every tick, for an election timeout: a vote the
// voters refuse while the old leader's lease runs is asked for again as
// soon as it runs out, rather than after a randomized timeout of its own.
func (g *Group) Campaign() {
	g.do(func() {
		g.campaignUntil = time.Now().Add(2 * time.Duration(g.cfg.ElectionTicks) * g.cfg.Tick)
		g.campaign()
	})
}

// recampaignTicks is how long a candidacy the client asked for may go
// unanswered before it starts over in a newer term: a split vote with a
// follower whose own timer fired at the same moment would otherwise wait
// out a randomized election timeout.
const recampaignTicks = 3

// campaign stands for election if this node may, and is not a candidate
// already (unless its candidacy stalled). Called with raftMu held.
func (g *Group) campaign() {
	if g.leading || !g.isVoter(g.id) || g.cfg.TieBreaker || g.out != nil {
		return
	}
	switch g.rn.BasicStatus().RaftState {
	case raft.StateFollower:
	case raft.StateCandidate, raft.StatePreCandidate:
		if g.ticks-g.campaignedAt < recampaignTicks {
			return
		}
	default:
		return
	}
	g.campaignedAt = g.ticks
	g.refusedBy = g.refusedBy[:0]
	g.rn.Campaign()
}

// voteAnswer steps m, a peer's answer to this node's pre-vote, and tells
// the host when it ends a candidacy a client asked for in defeat. raft
// refuses a pre-vote only to a candidate whose log is behind the voter's
// (or whose term is): standing again every tick, as Campaign does, would
// be refused every time until a voter's own randomized timer elects it,
// up to an election timeout later, while the client's write waits here.
// The host hands the write to a voter that refused instead, which stands
// at once. Called with raftMu held.
func (g *Group) voteAnswer(m *pb.Message) {
	refused := m.GetReject() && !g.campaignUntil.IsZero() && g.rn.BasicStatus().RaftState == raft.StatePreCandidate
	g.rn.Step(m)
	if !refused {
		return
	}
	if name := g.nameOf(m.GetFrom()); name != "" && !slices.Contains(g.refusedBy, name) {
		g.refusedBy = append(g.refusedBy, name)
	}
	if g.rn.BasicStatus().RaftState == raft.StatePreCandidate || len(g.refusedBy) == 0 {
		return // still standing: the other voters may yet grant it
	}
	g.campaignUntil = time.Time{}
	by := slices.Clone(g.refusedBy)
	g.log.Debug("ffgen: raft: the voters refused this node's candidacy, their logs being ahead; the writes held here go to them", "refused_by", by)
	g.emit(func() { g.cfg.Host.CandidacyRefused(by) })
}

// Recorded returns the result of a write that has been applied here, by
// operation ID.
func (g *Group) Recorded(opID [16]byte) (frame.Result, bool) {
	g.wmu.Lock()
	r, ok := g.written.get(opID)
	g.wmu.Unlock()
	return r.result, ok
}

// LeaderSilent reports whether the leader this node knows, another node,
// has sent nothing for longer than a few of its heartbeats: it may be
// frozen or cut off, and a write is better not sent there.
func (g *Group) LeaderSilent() bool {
	heard := g.leaderHeard.Load()
	return heard != 0 && time.Since(time.Unix(0, heard)) > time.Duration(3*g.cfg.HeartbeatTicks)*g.cfg.Tick
}

// Leader returns the leader's name as this node knows it, and whether
// this node leads.
func (g *Group) Leader() (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st.Leader, g.st.Leading
}

// EachVoter calls f with the name of each voter of the group as this node
// knows it (its own included), until f returns false; it reports whether
// f never did. f runs under the group's status lock: it must not call
// the group.
func (g *Group) EachVoter(f func(name string) bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range g.st.Voters {
		if !f(v) {
			return false
		}
	}
	return true
}

// WaitApplied waits until this node has applied index.
func (g *Group) WaitApplied(ctx context.Context, index uint64) error {
	return g.await(ctx, func() bool { return g.applied.Load() >= index }, func() (chan struct{}, error) {
		if g.appliedCh == nil {
			g.appliedCh = make(chan struct{})
		}
		return g.appliedCh, g.stopErr
	})
}

// await waits until done holds. next, called with mu held, returns the
// channel closed when done may have changed, or why it never will.
func (g *Group) await(ctx context.Context, done func() bool, next func() (chan struct{}, error)) error {
	for {
		if done() {
			return nil
		}
		g.mu.Lock()
		ch, err := next()
		g.mu.Unlock()
		if err != nil {
			return err
		}
		if done() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.stopc:
			return ErrStopped
		}
	}
}

// Applied is the index of the last entry applied here.
func (g *Group) Applied() uint64 { return g.applied.Load() }

// Drain makes the node refuse what it can no longer vouch for: it is
// shutting down.
func (g *Group) Drain() {
	g.mu.Lock()
	g.draining = true
	g.setServingLocked(false)
	g.mu.Unlock()
}

// setServingLocked publishes whether the node serves, waking those who
// wait for it to change. Called with mu held.
func (g *Group) setServingLocked(on bool) {
	if g.serving.Load() == on {
		return
	}
	g.serving.Store(on)
	close(g.servingCh)
	g.servingCh = make(chan struct{})
}

// MayServeSoon reports whether a node that does not serve lacks only a
// leader, or a few entries: a voter that has not stopped, is not draining,
// and does not trail the leader too far. What arrives meanwhile may wait
// for it.
func (g *Group) MayServeSoon() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	st.Applied = g.applied.Load()
	return g.stopErr == nil && !g.draining && st.Removed == "" && st.Role == "voter" && g.stalledLocked(&st) == nil
}

// WaitServing waits until the node serves the service.
func (g *Group) WaitServing(ctx context.Context) error {
	return g.await(ctx, g.serving.Load, func() (chan struct{}, error) { return g.servingCh, nil })
}

// Serving reports whether the node serves the service (Ready, cached).
func (g *Group) Serving() bool { return g.serving.Load() }

// Stopped reports whether apply stopped at a write it cannot apply.
func (g *Group) Stopped() bool { return g.stopped() }

// CanLead reports whether this node may become the leader: a voter that
// is not a tie-breaker.
func (g *Group) CanLead() bool { return g.canLead.Load() }

// Receive takes a Replica frame from a peer; raft steps a raft message at
// the next Flush. body is copied where kept.
func (g *Group) Receive(from string, kind uint8, body []byte) error {
	switch kind {
	case KindRaft:
		return g.receiveRaft(body)
	case KindChunk:
		var c chunk
		if err := c.unmarshal(body); err != nil {
			return err
		}
		g.asmMu.Lock()
		a := g.asm[from]
		if a == nil {
			a = &assembly{}
			g.asm[from] = a
		}
		whole, err := a.add(&c, g.cfg.MaxMessageBytes)
		g.asmMu.Unlock()
		if err != nil || whole == nil {
			return err
		}
		return g.receiveRaft(whole)
	case KindHello:
		var h hello
		if err := h.unmarshal(body); err != nil {
			return err
		}
		if h.name != from {
			return fmt.Errorf("hello from %s names %s", from, h.name)
		}
		g.do(func() { g.onHello(h) })
		return nil
	}
	return fmt.Errorf("unknown replication message kind %d", kind)
}

func (g *Group) receiveRaft(body []byte) error {
	m := new(pb.Message)
	if err := unmarshalMessage(body, m); err != nil {
		return err
	}
	if m.GetTo() != g.id {
		// For an earlier incarnation of this node: raft must not take
		// it as its own.
		return nil
	}
	if from := m.GetFrom(); from != 0 && from == g.leadID.Load() {
		g.leaderHeard.Store(time.Now().UnixNano())
	}
	g.inMu.Lock()
	full := len(g.inMsgs) >= maxInbox
	if !full {
		g.inMsgs = append(g.inMsgs, m)
	}
	g.inMu.Unlock()
	if full {
		g.log.Debug("ffgen: dropped a raft message: raft is behind with the peers' messages", "from", m.GetFrom(), "type", m.GetType())
	}
	g.flushDue.Store(true)
	return nil
}
