package replica

import (
	"context"
	"encoding/binary"

	"go.etcd.io/raft/v3"
)

// Linearizable reads, batched as etcd's server batches them: raft's
// ReadIndex costs the leader a heartbeat round to every follower (and a
// follower a message to the leader and back), so one request serves every
// read that arrived before it was sent, and a node has one request in
// flight at a time. A read joins the round not yet sent, never one in
// flight: its index must be fixed after the read arrived. The round is
// sent once the one in flight is answered, so that under many readers a
// node sends a round per round trip, whatever the rate of reads: sending
// one per turn of the Ready loop, a follower of a busy cluster sent one
// for about every read, and the leader's heartbeats for them were most of
// the cluster's raft messages.

// readRetryTicks is how long a round may go unanswered before the next is
// sent anyway: raft drops a request it cannot serve without a word (no
// leader, a message lost on the way), and a round answered late answers
// the ones sent before it.
const readRetryTicks = 2

// A readRound is one raft ReadIndex request and the reads that wait on it.
type readRound struct {
	done   chan struct{} // closed once index or err is set
	index  uint64
	err    error
	joined int // reads waiting on it; guarded by Group.mu
}

// ReadIndex returns an index such that a read served once Applied has
// reached it sees every write committed before the call (raft's
// ReadIndex: the leader confirms with a heartbeat round that it still
// leads). It waits until ctx ends without a leader, or the group stops.
func (g *Group) ReadIndex(ctx context.Context) (uint64, error) {
	g.mu.Lock()
	r := g.readNext
	first := r == nil
	if first {
		r = &readRound{done: make(chan struct{})}
		g.readNext = r
	}
	r.joined++
	send := first && g.readSent == 0
	g.mu.Unlock()
	if send {
		g.do(g.sendRead)
	}
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-g.stopc:
		// A round begun once Stop has ended the waiting ones has nobody
		// to answer it.
		return 0, ErrStopped
	}
}

// sendRead hands raft the round that reads have joined since the last.
// Called with raftMu held.
func (g *Group) sendRead() {
	g.mu.Lock()
	r := g.readNext
	if r == nil {
		g.mu.Unlock()
		return
	}
	g.readNext = nil
	g.readSeq++
	seq := g.readSeq
	g.readRounds[seq] = r
	g.readSent, g.readSentAt = seq, g.ticks
	g.mu.Unlock()
	var rctx [8]byte
	binary.BigEndian.PutUint64(rctx[:], seq)
	g.rn.ReadIndex(rctx[:])
}

// retryRead sends the next round if the one in flight has gone unanswered
// for readRetryTicks. Called with raftMu held, on every tick.
func (g *Group) retryRead() {
	g.mu.Lock()
	late := g.readSent != 0 && g.readNext != nil && g.ticks-g.readSentAt >= readRetryTicks
	g.mu.Unlock()
	if late {
		g.sendRead()
	}
}

// readDone answers the round a ReadState is for, and any sent before it
// still unanswered (raft drops a request it cannot serve, without a
// word): an index fixed after a later round was sent was fixed after
// every read of the earlier ones arrived. Then it sends the round the
// reads that arrived meanwhile have joined. Called with raftMu held.
func (g *Group) readDone(rs raft.ReadState) {
	if len(rs.RequestCtx) != 8 {
		return
	}
	seq := binary.BigEndian.Uint64(rs.RequestCtx)
	var done []*readRound
	g.mu.Lock()
	for s, r := range g.readRounds {
		if s <= seq {
			done = append(done, r)
			delete(g.readRounds, s)
		}
	}
	if seq >= g.readSent {
		g.readSent = 0
	}
	next := g.readSent == 0 && g.readNext != nil
	g.mu.Unlock()
	for _, r := range done {
		r.index = rs.Index
		close(r.done)
	}
	if next {
		g.sendRead()
	}
}

// endReads ends every waiting read with ErrStopped.
func (g *Group) endReads() {
	g.mu.Lock()
	rounds := g.readRounds
	g.readRounds = map[uint64]*readRound{}
	if g.readNext != nil {
		rounds[0] = g.readNext
		g.readNext = nil
	}
	g.readSent = 0
	g.mu.Unlock()
	for _, r := range rounds {
		r.err = ErrStopped
		close(r.done)
	}
}
