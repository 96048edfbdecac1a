package replica

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// chunkBytes is the largest raft message sent in one frame; larger ones (a
// snapshot) go in parts of this size.
const chunkBytes = 1 << 20

func unmarshalMessage(b []byte, m *pb.Message) error { return proto.Unmarshal(b, m) }

// Raft runs on whichever goroutine has something for it: the transport's
// reader that brought writes or a peer's messages, once it has handled the
// whole batch of frames it read (Flush), and the ticker. Whoever holds
// raftMu steps what the inbox holds and handles every Ready as etcd's
// server does (persist, send, hand the committed entries to the apply
// goroutine, advance). A write thus reaches raft and its appends reach the
// followers without a goroutine hand-off; and what a connection brought
// together is one step of raft, so that under load many writes share one
// Ready, one append to each follower and one answer from each. A goroutine
// that brought work takes a few rounds at most and leaves what arrives
// meanwhile to the run goroutine: a transport reader kept busy by raft
// would stop reading its connection (the peer's answers would wait behind
// it), and the ticker would stop ticking (no heartbeats, no elections).
// What the server must hear of (a new leader, a proposal raft dropped)
// goes through the event goroutine, so that raft never waits on the
// server's lock.

// kickRounds is how many rounds a goroutine that brought work takes
// before it leaves the rest to the run goroutine.
const kickRounds = 2

// maxInbox bounds the peers' messages waiting for raft, as etcd's
// transport bounds its receive buffer: past it a message is dropped, and
// raft sends again what it needs.
const maxInbox = 4096

// run ticks raft and takes the rounds other goroutines leave.
func (g *Group) run() {
	defer g.wg.Done()
	t := time.NewTicker(g.cfg.Tick)
	defer t.Stop()
	g.raftMu.Lock()
	g.alone()
	g.raftMu.Unlock()
	g.wakeRun() // for what arrived meanwhile
	for {
		select {
		case <-g.stopc:
			return
		case <-t.C:
			if g.frozen.Load() {
				continue
			}
			g.raftMu.Lock()
			if g.halted() != nil {
				g.dropInbox()
				g.retryDisk()
			} else {
				g.rn.Tick()
				g.tick()
				g.process()
				g.refreshPeers()
			}
			g.raftMu.Unlock()
		case <-g.runWake:
			if g.frozen.Load() {
				continue // Thaw wakes it again
			}
			g.raftMu.Lock()
			g.process()
			g.raftMu.Unlock()
		}
		// One round per wake-up, so that a busy group still ticks.
		if g.inboxed() {
			g.wakeRun()
		}
	}
}

// kick processes the inbox on this goroutine for a few rounds, unless
// another goroutine holds raftMu: that one finds what was added before it
// lets go (it looks again after unlocking). What is left goes to the run
// goroutine. With a disk, the run goroutine does all of it: a Ready then
// waits for an fsync, which must hold up neither a connection's reader
// nor a handler.
func (g *Group) kick() {
	if g.frozen.Load() {
		return // Thaw wakes the run goroutine
	}
	if g.disk != nil {
		if g.inboxed() {
			g.wakeRun()
		}
		return
	}
	for range kickRounds {
		if !g.inboxed() {
			return
		}
		select {
		case <-g.stopc:
			return
		default:
		}
		if !g.raftMu.TryLock() {
			return
		}
		g.process()
		g.raftMu.Unlock()
	}
	if g.inboxed() {
		g.wakeRun()
	}
}

func (g *Group) wakeRun() {
	select {
	case g.runWake <- struct{}{}:
	default:
	}
}

func (g *Group) inboxed() bool {
	g.inMu.Lock()
	defer g.inMu.Unlock()
	return len(g.inMsgs)+len(g.inProps)+len(g.inCtl) > 0
}

// process steps the inbox and handles the Readys. Called with raftMu held.
func (g *Group) process() {
	if g.halted() != nil {
		g.dropInbox()
		return
	}
	g.drainInbox()
	g.handleReady()
}

// emit hands the server an event, in order, on the event goroutine.
func (g *Group) emit(f func()) {
	g.evMu.Lock()
	g.events = append(g.events, f)
	g.evMu.Unlock()
	select {
	case g.evWake <- struct{}{}:
	default:
	}
}

func (g *Group) eventLoop() {
	defer g.wg.Done()
	for {
		g.evMu.Lock()
		evs := g.events
		g.events = nil
		g.evMu.Unlock()
		for _, f := range evs {
			f()
		}
		if len(evs) > 0 {
			continue
		}
		select {
		case <-g.stopc:
			return
		case <-g.evWake:
		}
	}
}

func (g *Group) drainInbox() {
	g.inMu.Lock()
	msgs, props, ctl := g.inMsgs, g.inProps, g.inCtl
	g.inMsgs, g.inSpare, g.inProps, g.inCtl = g.inSpare[:0], nil, nil, nil
	g.inMu.Unlock()
	for i, m := range msgs {
		from := m.GetFrom()
		if !g.isVoter(from) && !g.isLearner(from) && g.tellRemoved(g.nameOf(from), from) {
			continue // raft would not take it either
		}
		g.lastFrom[from] = g.ticks
		if staleHeartbeatResp(m, msgs[i+1:]) {
			continue
		}
		// An error is a message raft does not take (from an unknown
		// term's proposal forwarding, a local message type): nothing to
		// do about it but drop it.
		g.noteCommitNotice(m)
		if m.GetType() == pb.MessageType_MsgPreVoteResp {
			g.voteAnswer(m)
			continue
		}
		g.rn.Step(m)
	}
	if cap(msgs) <= maxInbox {
		clear(msgs)
		g.inMu.Lock()
		g.inSpare = msgs[:0]
		g.inMu.Unlock()
	}
	for _, f := range ctl {
		f()
	}
	g.propose(props)
}

// propose steps the proposals as one: raft appends them together and
// sends each follower one append for all of them, where a proposal at a
// time would cost an append (and an answer) each. Called with raftMu
// held.
func (g *Group) propose(props []proposal) {
	if len(props) == 0 {
		return
	}
	why := "not the leader"
	if g.leading {
		ents := make([]*pb.Entry, len(props))
		for i, p := range props {
			ents[i] = &pb.Entry{Data: p.data}
		}
		err := g.rn.Step(&pb.Message{Type: pb.MessageType_MsgProp.Enum(), From: proto.Uint64(g.id), Entries: ents})
		if err == nil {
			return
		}
		why = err.Error()
	}
	for _, p := range props {
		g.emit(func() { g.cfg.Host.Dropped(p.opID, why) })
	}
}

// staleHeartbeatResp reports whether a later message of the same batch
// says all that m does: a heartbeat answer from the same peer in the same
// term for the same read request. raft answers every heartbeat answer from
// a follower it probes with an append of up to a megabyte: a burst of them,
// delayed by a cut that healed, would otherwise cost one append each.
func staleHeartbeatResp(m *pb.Message, later []*pb.Message) bool {
	if m.GetType() != pb.MessageType_MsgHeartbeatResp {
		return false
	}
	for _, n := range later {
		if n.GetType() == pb.MessageType_MsgHeartbeatResp && n.GetFrom() == m.GetFrom() &&
			n.GetTerm() == m.GetTerm() && bytes.Equal(n.GetContext(), m.GetContext()) {
			return true
		}
	}
	return false
}

func (g *Group) handleReady() {
	for g.halted() == nil && g.rn.HasReady() {
		select {
		case <-g.stopc:
			return // the store may be closing
		default:
		}
		rd := g.rn.Ready()
		if rd.SoftState != nil {
			g.softState(rd.SoftState)
		}
		// The leader sends before it stores, as etcd's server does: its
		// appends reach the followers while its own fsync runs (Raft
		// thesis, 10.2.1), and raft counts the leader's copy only once
		// Advance says it is stored. Its term and vote were stored
		// before it became leader. Everyone else stores first: a vote or
		// an acknowledgement must not promise what a crash could undo.
		leading := g.leading
		// A leader's committed entries are on a quorum's disks and on its
		// own (raft counts its own copy only once Advance says it is
		// stored): apply starts before this Ready's sends and store,
		// which the writes' callers need not wait for.
		early := leading && raft.IsEmptySnap(rd.Snapshot)
		if early {
			g.handCommitted(rd.CommittedEntries, applyItem{})
		}
		if leading {
			g.send(rd.Messages)
		}
		var snap *pb.Snapshot
		if !raft.IsEmptySnap(rd.Snapshot) {
			snap = rd.Snapshot
		}
		var hs *pb.HardState
		if !raft.IsEmptyHardState(rd.HardState) {
			hs = rd.HardState
			g.commit, g.commitKnown = hs.GetCommit(), true
		}
		// Only what raft must find again after a crash is stored, with an
		// fsync, as etcd's server syncs only then (raft.MustSync):
		// entries, a snapshot, a new term or vote. A hard state that
		// moves only the commit index (every write's commit on the
		// leader, and on each follower when it hears of it) rides with
		// the next store: a restarted node learns the newer commit from
		// the leader, and a snapshot stored here raises it to its own
		// index (saveSnapshot). Storing it at once cost each write a
		// second fsync on its way to apply, and one on every follower.
		if g.disk != nil && (snap != nil || rd.MustSync) {
			if hs == nil {
				// Unchanged since the last Ready, which may not have
				// stored it.
				hs = g.rn.BasicStatus().HardState
			}
			began := time.Now()
			if err := g.disk.save(hs, rd.Entries, snap); err != nil {
				g.diskFailed(err)
				return
			}
			if g.diskFailing {
				g.diskFailing = false
				g.log.Info("ffgen: storing the replicated state again")
			}
			// As etcd warns of a slow fdatasync: a store slower than a
			// heartbeat costs leaders and elections.
			if took := time.Since(began); took > time.Duration(g.cfg.HeartbeatTicks)*g.cfg.Tick {
				g.log.Warn("ffgen: storing the replicated state was slow", "took", took, "entries", len(rd.Entries))
			}
		}
		var item applyItem
		if snap != nil {
			if err := g.storage.ApplySnapshot(snap); err == nil {
				item.snap = snap
				g.conf = snap.GetMetadata().GetConfState()
				g.updateMembers()
				g.handed = snap.GetMetadata().GetIndex()
			}
		}
		if len(rd.Entries) > 0 {
			g.storage.Append(rd.Entries)
		}
		if hs != nil {
			g.storage.SetHardState(hs)
		}
		if !leading {
			g.send(g.withoutNoticeAnswers(rd.Messages))
		}
		for _, rs := range rd.ReadStates {
			g.readDone(rs)
		}
		if !early {
			g.handCommitted(rd.CommittedEntries, item)
		}
		g.rn.Advance(rd)
	}
	g.refreshStatus()
}

// handCommitted hands the apply goroutine item (with the snapshot to
// install first, if any) and the committed entries it has not had. Called
// with raftMu held.
func (g *Group) handCommitted(committed []*pb.Entry, item applyItem) {
	// After raft was started again from storage (retryDisk), it hands
	// over once more the entries since the snapshot: their configuration
	// changes rebuild raft's configuration, but apply has them already.
	fresh := committed
	for len(fresh) > 0 && fresh[0].GetIndex() <= g.handed {
		g.confChange(fresh[0])
		fresh = fresh[1:]
	}
	for _, e := range fresh {
		if cs := g.confChange(e); cs != nil {
			item.confs = append(item.confs, confAt{index: e.GetIndex(), cs: cs})
		}
	}
	item.entries = fresh
	if n := len(fresh); n > 0 {
		g.handed = fresh[n-1].GetIndex()
	}
	if item.snap != nil || len(item.entries) > 0 {
		g.enqueue(item)
	}
}

// softState follows a change of leader or role.
func (g *Group) softState(ss *raft.SoftState) {
	leading := ss.RaftState == raft.StateLeader
	if ss.Lead == g.lead && leading == g.leading {
		return
	}
	g.lead, g.leading = ss.Lead, leading
	g.leadID.Store(ss.Lead)
	if !leading {
		g.leaderHeard.Store(time.Now().UnixNano()) // a new leader starts heard
	}
	name := g.nameOf(ss.Lead)
	if leading {
		g.leadSince = g.ticks
		g.log.Info("ffgen: leading the replicated service", "term", g.rn.BasicStatus().HardState.GetTerm())
	}
	g.mu.Lock()
	g.st.Leader, g.st.Leading = name, leading
	g.mu.Unlock()
	g.emit(func() { g.cfg.Host.LeaderChanged(name, leading) })
	if leading && g.cfg.TieBreaker {
		g.handOver()
	}
}

// halted returns why raft is not driven: the node cannot store its state
// (restart.go), or the group removed it (members.go); nil while it runs.
// Called with raftMu held.
func (g *Group) halted() error {
	if g.out != nil {
		return g.out
	}
	return g.diskErr
}

// forgetLeader follows this node's stop of driving raft: it knows no
// leader, leads nothing and serves nothing; why records the reason in the
// status. Called with raftMu held.
func (g *Group) forgetLeader(why func(*Status)) {
	knew := g.lead != 0
	g.lead, g.leading = 0, false
	g.leadID.Store(0)
	g.mu.Lock()
	g.st.Leader, g.st.Leading = "", false
	why(&g.st)
	g.setServingLocked(false)
	g.mu.Unlock()
	if knew {
		g.emit(func() { g.cfg.Host.LeaderChanged("", false) })
	}
}

// send sends raft's messages. One that cannot go is lost, as raft allows:
// it sends again. Once a message to a peer could not go, the rest of the
// batch to that peer is reported unreachable without being encoded: its
// connection is gone or its queue is full, and a follower raft probes may
// have a megabyte append in the batch for every heartbeat it answered.
func (g *Group) send(msgs []*pb.Message) {
	var failed map[uint64]bool
	for _, m := range msgs {
		to := m.GetTo()
		snap := m.GetType() == pb.MessageType_MsgSnap
		var err error
		name := g.nameOf(to)
		switch {
		case failed[to]:
			err = errUnsent
		case name == "":
			err = errNoName
		default:
			var b []byte
			if b, err = (proto.MarshalOptions{}).MarshalAppend(g.encBuf[:0], m); err == nil {
				err = g.sendBytes(name, b)
				if cap(b) <= chunkBytes {
					g.encBuf = b
				}
			}
			if snap && err == nil {
				g.log.Info("ffgen: sent a snapshot", "peer", name, "index", m.GetSnapshot().GetMetadata().GetIndex(), "bytes", len(b))
			}
		}
		if err == nil {
			if snap {
				g.rn.ReportSnapshot(to, raft.SnapshotFinish)
			}
			continue
		}
		if !failed[to] {
			if failed == nil {
				failed = make(map[uint64]bool)
			}
			failed[to] = true
			g.rn.ReportUnreachable(to)
		}
		if snap {
			if name != "" && err != errUnsent {
				g.log.Warn("ffgen: could not send a snapshot", "peer", name, "err", err)
			}
			g.rn.ReportSnapshot(to, raft.SnapshotFailure)
		}
	}
}

var (
	errUnsent = errors.New("an earlier message to the peer could not go")
	errNoName = errors.New("the peer's name is not known")
)

// sendBytes sends an encoded raft message, in parts if it is large.
func (g *Group) sendBytes(to string, b []byte) error {
	if len(b) <= chunkBytes {
		return g.cfg.Host.Send(to, KindRaft, b)
	}
	g.chunkSeq++
	total := uint32((len(b) + chunkBytes - 1) / chunkBytes)
	for i := uint32(0); i < total; i++ {
		part := b[int(i)*chunkBytes : min(len(b), int(i+1)*chunkBytes)]
		c := chunk{msg: g.chunkSeq, seq: i, total: total, data: part}
		if err := g.cfg.Host.Send(to, KindChunk, c.marshal()); err != nil {
			return err
		}
	}
	return nil
}

// confChange applies a committed configuration change to raft, returning
// the configuration it makes, or nil for any other entry.
func (g *Group) confChange(e *pb.Entry) *pb.ConfState {
	var cc pb.ConfChangeI
	switch e.GetType() {
	case pb.EntryType_EntryConfChange:
		c := new(pb.ConfChange)
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			g.log.Error("ffgen: a configuration change does not decode", "index", e.GetIndex(), "err", err)
			return nil
		}
		if len(c.GetContext()) > 0 && c.GetType() != pb.ConfChangeType_ConfChangeRemoveNode {
			g.setName(c.GetNodeId(), string(c.GetContext()))
		}
		cc = c
	case pb.EntryType_EntryConfChangeV2:
		c := new(pb.ConfChangeV2)
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			g.log.Error("ffgen: a configuration change does not decode", "index", e.GetIndex(), "err", err)
			return nil
		}
		cc = c
	default:
		return nil
	}
	old := g.conf
	g.conf = g.rn.ApplyConfChange(cc)
	g.noteRemoved(old, g.conf)
	g.confBusy = time.Time{}
	g.updateMembers()
	if c, ok := cc.(*pb.ConfChange); ok && c.GetType() == pb.ConfChangeType_ConfChangeRemoveNode && c.GetNodeId() == g.id && !g.leaving {
		g.outOfGroup(fmt.Sprintf("it applied its own removal, at index %d", e.GetIndex()))
	}
	return g.conf
}

func (g *Group) nameOf(id uint64) string {
	if id == 0 {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.names[id]
}

func (g *Group) setName(id uint64, name string) {
	g.mu.Lock()
	g.names[id] = name
	g.mu.Unlock()
}

func (g *Group) isVoter(id uint64) bool {
	for _, v := range g.conf.GetVoters() {
		if v == id {
			return true
		}
	}
	return false
}

func (g *Group) isLearner(id uint64) bool {
	for _, v := range g.conf.GetLearners() {
		if v == id {
			return true
		}
	}
	return false
}

// member reports whether the group has formed here: this node knows a
// configuration.
func (g *Group) member() bool {
	return g.restored || len(g.conf.GetVoters()) > 0 || len(g.conf.GetLearners()) > 0
}
