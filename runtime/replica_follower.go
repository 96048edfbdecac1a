package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// The follower's side, and what every replica does: take appends, run
// committed writes in index order, notice it is behind, and catch up.

// onAppend takes a sequencer's entries.
func (r *replica) onAppend(c transport.Conn, m *appendMsg) {
	ack := func(status uint8, match uint64) {
		sendReplica(c, r.name, msgAck, &ackMsg{epoch: r.epoch, status: status, match: match})
	}
	if m.epoch.Less(r.epoch) {
		ack(ackStale, 0)
		return
	}
	if r.epoch.Less(m.epoch) {
		r.epoch = m.epoch
		r.stepDown("superseded by epoch " + m.epoch.String())
		r.failTakeover("superseded by epoch " + m.epoch.String())
	}
	if r.leading {
		return // our own epoch: cannot come from elsewhere
	}
	if r.fetch != nil {
		ack(ackNotReady, r.log.last())
		return
	}
	r.lastAppend = time.Now()
	if m.snapshot {
		if r.log.last() >= m.prevIndex {
			// A copy taken since reaches the sequencer's log: say
			// where this node stands, and it resends from there.
			ack(ackGap, r.log.last())
			return
		}
		// The sequencer's log no longer reaches back to this node.
		r.needSnapshot = true
		r.setBehind("further behind than the sequencer's log reaches")
		ack(ackNotReady, r.log.last())
		return
	}
	if m.prevIndex > r.log.last() {
		// Behind until the sequencer has resent what is missing.
		if r.ready {
			r.setBehind(fmt.Sprintf("missed writes %d..%d", r.log.last()+1, m.prevIndex))
		}
		ack(ackGap, r.log.last())
		return
	}
	if m.prevIndex >= r.log.base {
		if ep, _ := r.log.epochAt(m.prevIndex); ep != m.prevEpoch {
			if m.prevIndex <= r.applied {
				r.diverged(m.epoch, m.prevIndex)
				return
			}
			r.log.truncate(m.prevIndex)
			ack(ackGap, m.prevIndex-1)
			return
		}
	}
	for _, en := range m.entries {
		if en.index <= r.log.base {
			continue // in the state already
		}
		if have := r.log.at(en.index); have != nil {
			if have.epoch == en.epoch {
				continue
			}
			if en.index <= r.applied {
				r.diverged(m.epoch, en.index)
				return
			}
			r.log.truncate(en.index)
		}
		if en.index != r.log.last()+1 {
			break
		}
		en.applied = false // a sequencer's own flag, not ours
		r.log.append(en)
	}
	if c := min(m.commit, r.log.last()); c > r.commit {
		r.commit = c
	}
	r.apply()
	wasReady := r.ready
	if !r.ready && !r.needSnapshot && r.applied >= m.commit {
		r.setReady("in step with sequencer " + m.epoch.Node)
	}
	if len(m.entries) > 0 || !wasReady || m.commit < r.log.last() {
		// An Append without entries (a commit notice, a keep-alive)
		// needs an answer only when something changed, or when this
		// node holds entries the sequencer may not know it has.
		ack(ackOK, r.log.last())
	}
}

// onRecover answers a candidate sequencer: the promise to ignore older
// epochs, and this node's log beyond the candidate's commit index.
func (r *replica) onRecover(c transport.Conn, m *recoverMsg) {
	reply := recoveredMsg{epoch: r.epoch}
	if !r.epoch.Less(m.epoch) {
		reply.status = ackStale
		sendReplica(c, r.name, msgRecovered, &reply)
		return
	}
	r.epoch = m.epoch
	r.stepDown("a peer takes over with epoch " + m.epoch.String())
	r.failTakeover("a peer takes over with epoch " + m.epoch.String())
	reply = recoveredMsg{
		epoch:  m.epoch,
		commit: r.commit,
		last:   r.log.last(),
		lastEp: r.log.lastEpoch(),
	}
	if !r.ready && !r.everReady {
		// A node that never caught up holds nothing a candidate needs.
		reply.status = ackNotReady
		reply.last, reply.lastEp = 0, epoch{}
	}
	if reply.status == ackOK {
		if es, ok := r.log.after(m.from, maxBatch, maxBatchBytes); ok && (len(es) == 0 || es[len(es)-1].index == r.log.last()) {
			reply.covered, reply.entries = true, es
		}
	}
	sendReplica(c, r.name, msgRecovered, &reply)
}

// adopt replaces this node's log after the common prefix with es (from a
// peer whose log is more advanced). It reports false, and records a
// divergence, when that would undo a write that already ran here.
func (r *replica) adopt(es []*entry, from string, winner epoch) bool {
	for _, en := range es {
		if en.index <= r.log.base {
			continue
		}
		if have := r.log.at(en.index); have != nil {
			if have.epoch == en.epoch {
				continue
			}
			if en.index <= r.applied {
				r.diverged(winner, en.index)
				return false
			}
			r.log.truncate(en.index)
		}
		if en.index != r.log.last()+1 {
			return false
		}
		en.applied = false
		r.log.append(en)
	}
	return true
}

// apply dispatches committed entries, in index order, to the entity queues.
func (r *replica) apply() {
	if r.s.closed {
		// Shutting down: Shutdown waits for what runs; nothing new may
		// start behind its back.
		return
	}
	for !r.paused && r.applied < r.commit {
		en := r.log.at(r.applied + 1)
		if en == nil {
			return
		}
		r.applied++
		if en.applied {
			continue
		}
		e := en.exec
		if e == nil {
			e = r.s.replayExec(r, en)
			if e == nil {
				continue
			}
			en.exec = e
		}
		e.entry = en
		r.running++
		r.s.schedule(e)
	}
	r.log.trim(r.cfg.LogEntries, r.applied)
}

// finished records a write's result once it ran. A write that ended with
// Failover did not apply here (the handler declined, panicked or was
// stopped): this node is now behind the others. Called with s.mu held.
func (r *replica) finished(e *execution, res *transport.Result) {
	en := e.entry
	e.entry = nil
	en.exec = nil
	r.running--
	if res == nil || res.Status == transport.StatusFailover {
		if !r.s.halted {
			// A shutdown stops writes too; only a live node is behind.
			r.setBehind(fmt.Sprintf("write %d did not apply here", en.index))
		}
	} else {
		en.applied = true
		en.result = *res
		en.result.Call = 0
	}
	if r.running == 0 && len(r.snapWait) > 0 {
		waits := r.snapWait
		r.snapWait = nil
		for _, w := range waits {
			w()
		}
	}
}

// diverged records that this node ran writes the winning epoch does not
// have, and catches up from a snapshot of the winner's state.
func (r *replica) diverged(winner epoch, index uint64) {
	d := Divergence{At: time.Now(), Winner: winner.String(), Index: index}
	seen := map[string]bool{}
	for i := index; i <= r.applied; i++ {
		if en := r.log.at(i); en != nil {
			d.Writes++
			for _, id := range en.entities {
				if !seen[id] {
					seen[id] = true
					d.Entities = append(d.Entities, id)
				}
			}
		}
	}
	r.divergences = append(r.divergences, d)
	if len(r.divergences) > maxDivergences {
		r.divergences = r.divergences[1:]
	}
	r.s.cfg.Logger.Error("ffgen: replicas diverged: this node ran writes the newer epoch does not have; taking its state",
		"service", r.name, "winner", d.Winner, "index", index, "writes", d.Writes, "entities", d.Entities)
	r.needSnapshot = true
	r.setBehind("diverged from epoch " + winner.String())
}

// fetchState is a catch-up request in flight.
type fetchState struct {
	from  string
	until time.Time
}

// catchUpTick starts a catch-up when none is running: from the sequencer
// it knows, else from the first peer that answers. A node alone becomes
// ready at once: there is nobody to be behind.
func (r *replica) catchUpTick(now time.Time) {
	if r.fetch != nil && now.Before(r.fetch.until) {
		return
	}
	if r.everReady && !r.needSnapshot && now.Sub(r.lastAppend) < 4*r.cfg.AckTimeout {
		return // the sequencer is resending what this node lacks
	}
	peers := r.peers()
	if len(peers) == 0 {
		// Alone in a joined membership: a node that never held state
		// starts the cluster. One that did waits for a peer to compare
		// with. Without a membership yet (see UseMembership) it waits.
		m := r.s.cfg.Membership
		if m != nil && joined(m) && !r.everReady && r.log.last() == 0 {
			r.fetch = nil
			r.setReady("alone")
		}
		return
	}
	// Try peers in turn: the sequencer first, then by name, after the
	// one that failed last.
	start := 0
	if r.fetch != nil {
		for i, p := range peers {
			if p.Name == r.fetch.from {
				start = i + 1
			}
		}
	} else {
		for i, p := range peers {
			if p.Name == r.epoch.Node {
				start = i
			}
		}
	}
	p := peers[start%len(peers)]
	c := r.s.peerConn(p)
	if c == nil {
		// Being dialed: try it again shortly, and the next peer if the
		// dial does not come through.
		r.fetch = &fetchState{from: p.Name, until: now.Add(2 * r.cfg.AckTimeout)}
		return
	}
	r.fetch = &fetchState{from: p.Name, until: now.Add(10 * r.cfg.AckTimeout)}
	r.sendFetch(c)
}

// joined reports whether the membership has finished joining its cluster,
// for memberships that can say (an optional interface): before that, an
// empty view does not mean the node is alone.
func joined(m Membership) bool {
	if j, ok := m.(interface{ Joined() bool }); ok {
		return j.Joined()
	}
	return true
}

// onFetch serves a node that is behind: the log after its position, with a
// snapshot first when the log no longer reaches back that far.
func (r *replica) onFetch(c transport.Conn, m *fetchMsg) {
	if !r.ready {
		sendReplica(c, r.name, msgFetched, &fetchedMsg{status: ackNotReady, epoch: r.epoch,
			bootable: !r.everReady && r.log.last() == 0})
		return
	}
	if es, ok := r.log.after(m.from, maxBatch, maxBatchBytes); ok && !m.snapshot {
		sendReplica(c, r.name, msgFetched, &fetchedMsg{status: ackOK, epoch: r.epoch, commit: r.commit, entries: es})
		return
	}
	if r.transfer == nil {
		sendReplica(c, r.name, msgFetched, &fetchedMsg{status: ackNotReady, epoch: r.epoch})
		return
	}
	// A snapshot is of one log position: stop dispatching, let what runs
	// finish, then copy the state outside the lock.
	r.paused = true
	r.snapWait = append(r.snapWait, func() { r.sendSnapshot(c) })
	if r.running == 0 {
		waits := r.snapWait
		r.snapWait = nil
		for _, w := range waits {
			w()
		}
	}
}

// sendSnapshot is called with s.mu held and dispatching paused; it unlocks
// around the service's Snapshot.
func (r *replica) sendSnapshot(c transport.Conn) {
	at := r.applied
	atEp, _ := r.log.epochAt(at)
	if at < r.log.base {
		atEp = r.log.baseEp
	}
	r.snapping++
	go func() {
		state, err := r.transfer.SnapshotState()
		r.s.mu.Lock()
		defer r.s.mu.Unlock()
		r.snapshotDone()
		defer r.apply()
		if err != nil {
			r.s.cfg.Logger.Error("ffgen: snapshot failed", "service", r.name, "err", err)
			sendReplica(c, r.name, msgFetched, &fetchedMsg{status: ackNotReady, epoch: r.epoch})
			return
		}
		es, _ := r.log.after(at, maxBatch, maxBatchBytes)
		es = copyEntries(es) // sent off the lock while the originals run on
		epoch, commit := r.epoch, r.commit
		// The state goes in chunks that fit a frame, off the lock; a full
		// send queue is waited out briefly, and a failure leaves the
		// requester to ask again.
		go func() {
			for off := 0; ; off += snapshotChunk {
				end := min(off+snapshotChunk, len(state))
				m := fetchedMsg{status: ackOK, epoch: epoch, snapshot: true, snapAt: at, snapEp: atEp,
					offset: uint64(off), total: uint64(len(state)), state: state[off:end]}
				if end == len(state) {
					m.commit, m.entries = commit, es
				}
				if !sendPatiently(c, r.name, &m) || end == len(state) {
					return
				}
			}
		}()
	}()
}

// onFetched installs what a peer sent.
func (r *replica) onFetched(from string, m *fetchedMsg) {
	if r.fetch == nil || r.fetch.from != from || r.ready {
		return
	}
	if r.epoch.Less(m.epoch) {
		r.epoch = m.epoch
	}
	if m.status != ackOK {
		r.fetch.until = time.Time{} // ask the next peer at the next tick
		if m.bootable {
			r.bootable[from] = true
			r.tryBoot()
		}
		return
	}
	if m.snapshot {
		if m.offset == 0 {
			r.snapBuf = make([]byte, 0, min(m.total, 1<<30))
		}
		if uint64(len(r.snapBuf)) != m.offset {
			return // a chunk went missing: the next tick asks again
		}
		r.snapBuf = append(r.snapBuf, m.state...)
		if uint64(len(r.snapBuf)) < m.total {
			return
		}
		m.state, r.snapBuf = r.snapBuf, nil
		r.installSnapshot(from, m)
		return
	}
	before := r.applied
	r.adoptFetched(m.entries, m.commit)
	if !r.ready && r.applied > before {
		// More to replay, and the last batch helped: ask the same peer
		// at once. Otherwise the next tick asks again, so that two nodes
		// can never trade the same batch in a loop.
		if p, ok := r.member(from); ok {
			if c := r.s.peerConn(p); c != nil {
				r.fetch.until = time.Now().Add(10 * r.cfg.AckTimeout)
				r.sendFetch(c)
				return
			}
		}
	}
	r.fetch = nil
}

// sendFetch asks a peer for what this node lacks.
func (r *replica) sendFetch(c transport.Conn) {
	sendReplica(c, r.name, msgFetch, &fetchMsg{from: r.applied, snapshot: r.needSnapshot})
}

// snapshotChunk is the state carried by one Fetched message.
const snapshotChunk = 1 << 20

// sendPatiently sends m, waiting out a full send queue for a while.
func sendPatiently(c transport.Conn, service string, m *fetchedMsg) bool {
	for range 200 {
		err := sendReplica(c, service, msgFetched, m)
		if err == nil {
			return true
		}
		if !errors.Is(err, transport.ErrQueueFull) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// adoptFetched appends fetched entries and runs those committed.
func (r *replica) adoptFetched(es []*entry, commit uint64) {
	for _, en := range es {
		if have := r.log.at(en.index); have != nil && have.epoch != en.epoch {
			if en.index <= r.applied {
				r.diverged(en.epoch, en.index)
				return
			}
			r.log.truncate(en.index)
		}
		if en.index == r.log.last()+1 {
			en.applied = false
			r.log.append(en)
		}
	}
	r.commit = max(r.commit, min(commit, r.log.last()))
	r.apply()
	if r.applied >= commit {
		r.fetch = nil
		r.setReady("replayed the log")
	}
}

// installSnapshot replaces the state with a peer's. Called with s.mu held;
// it waits for this node's running writes and unlocks around Restore.
func (r *replica) installSnapshot(from string, m *fetchedMsg) {
	if r.transfer == nil {
		r.fetch = nil
		return
	}
	install := func() {
		r.paused = true
		r.snapping++
		go func() {
			err := r.transfer.RestoreState(m.state)
			r.s.mu.Lock()
			defer r.s.mu.Unlock()
			r.snapshotDone()
			r.fetch = nil
			if err != nil {
				r.s.cfg.Logger.Error("ffgen: restoring a snapshot failed", "service", r.name, "from", from, "err", err)
				return
			}
			r.needSnapshot = false
			r.snapshots++
			r.log.reset(m.snapAt, m.snapEp)
			r.applied, r.commit = m.snapAt, m.snapAt
			for _, en := range m.entries {
				if en.index <= m.snapAt {
					continue
				}
				if en.index == r.log.last()+1 {
					en.applied = false
					r.log.append(en)
				}
			}
			r.s.cfg.Logger.Info("ffgen: snapshot installed", "service", r.name, "from", from, "index", m.snapAt, "bytes", len(m.state))
			r.commit = max(r.commit, min(m.commit, r.log.last()))
			r.apply()
			if r.applied >= m.commit {
				r.setReady("snapshot from " + from)
			}
		}()
	}
	if r.running == 0 {
		install()
		return
	}
	r.paused = true
	r.snapWait = append(r.snapWait, install)
}

// snapshotDone ends one snapshot taken or installed. Dispatching resumes
// only when no other is under way or waiting for running writes: two
// peers that fetch a snapshot at once are each sent the state of the
// position they are told. Called with s.mu held.
func (r *replica) snapshotDone() {
	r.snapping--
	r.paused = r.snapping > 0 || len(r.snapWait) > 0
}

// tryBoot starts a cluster whose nodes all came up empty: the one with the
// lowest name becomes ready with the empty state, the others copy it.
func (r *replica) tryBoot() {
	if r.everReady || r.log.last() > 0 {
		return
	}
	for _, p := range r.peers() {
		if !r.bootable[p.Name] {
			return
		}
		if p.Name < r.self() {
			return
		}
	}
	r.fetch = nil
	r.setReady("alone")
}

// copyEntries copies entries for encoding outside the lock.
func copyEntries(es []*entry) []*entry {
	out := make([]*entry, len(es))
	for i, e := range es {
		c := *e
		c.exec = nil
		out[i] = &c
	}
	return out
}
