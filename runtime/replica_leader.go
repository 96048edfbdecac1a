package runtime

import (
	"fmt"
	"slices"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// The sequencer's side: it orders writes, sends them to the followers,
// commits them once enough hold them, and takes over an epoch when clients
// fail over to it.

// Replication answers, in the Code of a Failover result.
const (
	codeCatchingUp = "ffgen.catching-up" // the node is behind
	codeNotLeader  = "ffgen.not-sequencer"
)

// follower is what a sequencer knows of one follower.
type follower struct {
	sentTo     uint64    // entries up to here were sent
	match      uint64    // the follower's log agrees up to here
	inSync     bool      // acknowledged all it was sent within AckTimeout (reported)
	waiting    time.Time // since when an entry it has not acknowledged was sent
	hinted     bool      // told it is further behind than the log reaches
	heard      time.Time // its last answer of any kind
	gapAt      uint64    // where it last reported a gap
	gapRepeats int
}

type takeover struct {
	epoch   epoch
	need    int             // promises it cannot finish without
	waitFor map[string]bool // peers it waits for until the deadline: all but those the client saw fail
	failed  []string
	replies map[string]*recoveredMsg
	until   time.Time
	tries   int
}

// maxTakeoverTries bounds the restarts of a takeover that met a newer epoch.
const maxTakeoverTries = 3

// Batching bounds for one Append or Fetched message.
const (
	maxBatch      = 4096
	maxBatchBytes = 1 << 20
)

// write takes a client's scatter attempt on this node: e is the new
// execution, not scheduled. It returns the answer when the attempt is not
// taken; when it is (both nil), the caller registers e, which then waits
// for its commit. a is nil when a parked write is taken again after a
// takeover (e is registered already).
func (r *replica) write(e *execution, a *transport.Attempt) (*transport.Result, *transport.Redirect) {
	if !r.ready {
		return &transport.Result{Status: transport.StatusFailover, Code: codeCatchingUp, Message: "replica catching up: " + r.behind}, nil
	}
	en := r.log.byOp[e.info.OpID]
	if en != nil && en.applied {
		// A repeated attempt of a write that ran here.
		res := en.result
		return &res, nil
	}
	if !r.leading {
		if r.takeover == nil {
			var failed []string
			if a != nil {
				if rd := r.redirect(a); rd != nil {
					return nil, rd
				}
				for _, p := range a.History {
					failed = append(failed, p.Node)
				}
			}
			r.startTakeover(failed, 0)
		}
		switch {
		case r.takeover != nil:
			r.parked = append(r.parked, e)
			return nil, nil
		case !r.leading:
			return &transport.Result{Status: transport.StatusFailover, Code: codeNotLeader, Message: "could not take over as sequencer"}, nil
		}
		en = r.log.byOp[e.info.OpID] // the takeover may have adopted it
	}
	if en != nil {
		// Logged and not yet run: wait for it (arrive joins an entry
		// that already has an execution).
		if en.applied {
			res := en.result
			return &res, nil
		}
		if en.exec == nil {
			en.exec, e.entry = e, en
		}
		return nil, nil
	}
	r.appendWrite(e)
	return nil, nil
}

// redirect sends the attempt to the current sequencer when this node has no
// reason to take over: it is not the sequencer clients try first, the
// client did not fail over to it, and the sequencer it knows is alive.
func (r *replica) redirect(a *transport.Attempt) *transport.Redirect {
	if len(a.History) > 0 || r.epoch.Node == "" || r.epoch.Node == r.self() || r.naturalLeader() {
		return nil
	}
	m, ok := r.member(r.epoch.Node)
	if !ok {
		return nil
	}
	return &transport.Redirect{Node: m.Name, Addr: m.Addr}
}

// appendWrite gives e the next index and sends it to the followers.
func (r *replica) appendWrite(e *execution) {
	en := &entry{
		index:    r.log.last() + 1,
		epoch:    r.epoch,
		opID:     e.info.OpID,
		method:   e.method.Name,
		entities: e.entities,
		payload:  e.payload,
		md:       pairsOf(e.info.md),
		exec:     e,
	}
	e.entry = en
	r.log.append(en)
	r.replicate()
	r.advanceCommit()
}

// replicate sends every follower what it lacks, and refreshes the follower
// set from the membership.
func (r *replica) replicate() {
	now := time.Now()
	peers := r.peers()
	for _, m := range peers {
		f := r.followers[m.Name]
		if f == nil {
			f = &follower{sentTo: r.commit}
			r.followers[m.Name] = f
		}
		r.sendTo(m, f, now)
	}
	if len(r.followers) > len(peers) {
		// A member left the view. Peers are few; a scan allocates nothing
		// on the path every write takes.
		for name := range r.followers {
			if !slices.ContainsFunc(peers, func(m Member) bool { return m.Name == name }) {
				delete(r.followers, name)
			}
		}
	}
}

// sendTo sends f the entries after f.sentTo, or an empty Append (a
// keep-alive that carries the commit index) when it has them all.
func (r *replica) sendTo(m Member, f *follower, now time.Time) {
	c := r.s.peerConn(m)
	if c == nil {
		// Unreachable counts as silent: it leaves the in-sync set after
		// AckTimeout like a follower that does not acknowledge.
		if f.waiting.IsZero() && f.match < r.log.last() {
			f.waiting = now
		}
		return
	}
	msg := appendMsg{epoch: r.epoch, commit: r.commit}
	entries, ok := r.log.after(f.sentTo, maxBatch, maxBatchBytes)
	if !ok {
		// Its position is no longer in the log: it fetches a snapshot
		// itself once told.
		if f.hinted {
			return
		}
		f.hinted = true
		msg.snapshot, msg.prevIndex = true, r.log.base
	} else {
		msg.prevIndex = f.sentTo
		msg.prevEpoch, _ = r.log.epochAt(f.sentTo)
		msg.entries = entries
	}
	if sendReplica(c, r.name, msgAppend, &msg) != nil {
		if f.waiting.IsZero() && f.match < r.log.last() {
			f.waiting = now
		}
		return
	}
	if len(msg.entries) > 0 {
		f.sentTo = msg.entries[len(msg.entries)-1].index
		if f.waiting.IsZero() {
			f.waiting = now
		}
	}
}

// onAck handles a follower's answer to an Append.
func (r *replica) onAck(from string, m *ackMsg) {
	if r.epoch.Less(m.epoch) {
		r.epoch = m.epoch
		if r.leading {
			r.stepDown("superseded by epoch " + m.epoch.String())
		}
		return
	}
	f := r.followers[from]
	if !r.leading || m.epoch != r.epoch || f == nil {
		return
	}
	f.heard = time.Now()
	switch m.status {
	case ackOK:
		f.match = max(f.match, m.match)
		f.hinted, f.gapAt, f.gapRepeats = false, 0, 0
		if f.match >= f.sentTo {
			f.waiting = time.Time{}
		} else {
			f.waiting = time.Now()
		}
		if !f.inSync && f.match >= r.log.last() {
			f.inSync = true
			r.s.cfg.Logger.Info("ffgen: follower in sync", "service", r.name, "follower", from, "index", f.match)
		}
		r.advanceCommit()
	case ackGap:
		// It lacks entries: resend from where it agrees (or tell it to
		// take a snapshot). A gap reported at the same place twice in a
		// row waits for the next tick, so that no two nodes can trade
		// the same messages in a loop.
		f.inSync = false
		f.match = min(m.match, r.log.last())
		f.sentTo = f.match
		if f.gapAt == m.match {
			f.gapRepeats++
			if f.gapRepeats > 2 {
				return
			}
		} else {
			f.gapAt, f.gapRepeats = m.match, 0
		}
		if mb, ok := r.member(from); ok {
			r.sendTo(mb, f, time.Now())
		}
	case ackNotReady:
		// It is fetching a copy elsewhere: resume after what it has.
		f.inSync = false
		f.sentTo = min(m.match, r.log.last())
	}
}

// advanceCommit commits what a quorum holds (see quorum), and runs it. It
// waits for the quorum's slowest member, not for every follower: a slow
// follower delays nobody while the others answer.
func (r *replica) advanceCommit() {
	if !r.leading {
		return
	}
	target := r.log.last()
	if need := r.quorum(1 + len(r.followers)); need > 1 {
		matches := r.matchBuf[:0]
		for _, f := range r.followers {
			matches = append(matches, f.match)
		}
		r.matchBuf = matches
		slices.Sort(matches)
		target = min(target, matches[len(matches)-(need-1)])
	}
	if target <= r.commit {
		return
	}
	r.commit = target
	r.apply()
	// Tell the followers at once, so that they run the write about when
	// this node does, not at the next keep-alive.
	r.replicate()
}

// quorum is how many of n live nodes (the sequencer included) must hold a
// write before it commits: a majority, so that two sequencers of one
// membership view cannot both commit, and at least MinInSync.
func (r *replica) quorum(n int) int {
	return min(n, max(r.cfg.MinInSync, n/2+1))
}

// leaderTick drops followers that stopped acknowledging from the in-sync
// set, and keeps the others informed of the commit index.
func (r *replica) leaderTick(now time.Time) {
	for name, f := range r.followers {
		if f.waiting.IsZero() || now.Sub(f.waiting) <= r.cfg.AckTimeout {
			continue
		}
		if f.inSync {
			f.inSync = false
			r.s.cfg.Logger.Warn("ffgen: follower left the in-sync set", "service", r.name, "follower", name,
				"acknowledged", f.match, "last", r.log.last())
		}
		// Unacknowledged for a while: send again from what it
		// acknowledged, in case a message was lost.
		f.sentTo, f.waiting = f.match, time.Time{}
	}
	r.replicate()
	// Writes that cannot commit because too few nodes answer at all (this
	// node is cut off) are answered Failover, so that their clients try
	// the next sequencer. Followers that answer but are catching up will
	// hold the writes soon: waiting for them beats failing over.
	first := r.log.at(r.commit + 1)
	if first == nil || first.exec == nil || now.Sub(first.exec.arrived) < 2*r.cfg.AckTimeout {
		return
	}
	answering := 1
	for _, f := range r.followers {
		if f.inSync || now.Sub(f.heard) < 2*r.cfg.AckTimeout {
			answering++
		}
	}
	if need := r.quorum(1 + len(r.followers)); answering < need {
		r.stepDown(fmt.Sprintf("only %d of the %d nodes a write needs answer", answering, need))
	}
}

// stepDown stops sequencing: the writes waiting for their commit are
// answered Failover (their clients go to the next sequencer, which finds
// them in its log or gets them again) and stay in the log, uncommitted.
func (r *replica) stepDown(why string) {
	if !r.leading {
		return
	}
	r.leading = false
	r.s.cfg.Logger.Warn("ffgen: no longer the sequencer", "service", r.name, "reason", why, "epoch", r.epoch.String())
	for i := r.applied + 1; i <= r.log.last(); i++ {
		if en := r.log.at(i); en.exec != nil {
			e := en.exec
			en.exec, e.entry = nil, nil
			r.s.refuse(e, codeNotLeader, "no longer the sequencer: "+why)
		}
	}
	r.followers = make(map[string]*follower)
}

// startTakeover begins a new epoch led by this node: the live peers promise
// to ignore older epochs and send what their logs hold beyond this node's
// commit index, so that no write an older sequencer committed is lost. It
// waits for every peer but those the client saw fail (failed), until
// AckTimeout; it needs at least enough promises that every quorum that
// could have committed a write shares a node with them.
func (r *replica) startTakeover(failed []string, tries int) {
	ep := epoch{Term: r.epoch.Term + 1, Node: r.self()}
	r.epoch = ep
	peers := r.peers()
	n := 1 + len(peers)
	t := &takeover{
		epoch:   ep,
		need:    n - r.quorum(n),
		waitFor: make(map[string]bool),
		failed:  failed,
		replies: make(map[string]*recoveredMsg),
		until:   time.Now().Add(r.cfg.AckTimeout),
		tries:   tries,
	}
	r.takeover = t
	for _, m := range peers {
		if !slices.Contains(failed, m.Name) {
			t.waitFor[m.Name] = true
		}
		if c := r.s.peerConn(m); c != nil {
			sendReplica(c, r.name, msgRecover, &recoverMsg{epoch: ep, from: r.commit})
		}
	}
	r.maybeFinishTakeover(time.Now())
}

// maybeFinishTakeover finishes when every awaited peer promised, or at the
// deadline with enough promises; past the deadline without them it fails.
func (r *replica) maybeFinishTakeover(now time.Time) {
	t := r.takeover
	if t == nil {
		return
	}
	waiting := false
	for name := range t.waitFor {
		if t.replies[name] == nil {
			waiting = true
		}
	}
	switch {
	case len(t.replies) >= t.need && (!waiting || !now.Before(t.until)):
		r.finishTakeover()
	case !now.Before(t.until):
		r.failTakeover(fmt.Sprintf("%d of the %d promises it needs within %s", len(t.replies), t.need, r.cfg.AckTimeout))
	}
}

// onRecovered collects a peer's promise. A peer that knows a newer epoch
// makes the takeover start over above it.
func (r *replica) onRecovered(from string, m *recoveredMsg) {
	t := r.takeover
	if t == nil {
		return
	}
	if m.status == ackStale && m.epoch != t.epoch {
		if r.epoch.Less(m.epoch) {
			r.epoch = m.epoch
		}
		if t.tries+1 < maxTakeoverTries {
			r.takeover = nil
			r.startTakeover(t.failed, t.tries+1)
			return
		}
		r.failTakeover("a peer knows the newer epoch " + m.epoch.String())
		return
	}
	if m.epoch != t.epoch {
		return
	}
	t.replies[from] = m
	r.maybeFinishTakeover(time.Now())
}

// finishTakeover adopts the most advanced log among the answers (newest
// last epoch, then longest) and starts sequencing.
func (r *replica) finishTakeover() {
	t := r.takeover
	r.takeover = nil
	var best *recoveredMsg
	bestFrom := ""
	for from, m := range t.replies {
		if m.status != ackOK {
			continue
		}
		if best == nil || best.lastEp.Less(m.lastEp) || (best.lastEp == m.lastEp && best.last < m.last) ||
			(best.lastEp == m.lastEp && best.last == m.last && from < bestFrom) {
			best, bestFrom = m, from
		}
	}
	myEp := r.log.lastEpoch()
	if best != nil && (myEp.Less(best.lastEp) || (myEp == best.lastEp && r.log.last() < best.last)) {
		if !best.covered {
			// That peer can lead: send the waiting writes there (the
			// client follows a redirect without spending a failover).
			if mb, ok := r.member(bestFrom); ok {
				parked := r.parked
				r.parked = nil
				for _, e := range parked {
					r.s.redirect(e, &transport.Redirect{Node: mb.Name, Addr: mb.Addr})
				}
			}
			r.failTakeover("behind " + bestFrom)
			r.setBehind("a peer's log is ahead of this node's and no longer reaches back to it")
			return
		}
		if !r.adopt(best.entries, bestFrom, t.epoch) {
			r.failTakeover("diverged from " + bestFrom)
			return
		}
	}
	r.leading = true
	r.followers = make(map[string]*follower)
	for from, m := range t.replies {
		if _, ok := r.member(from); ok && m.status == ackOK {
			// Its log agrees with ours at least up to its commit; the
			// first Append settles the rest.
			f := &follower{sentTo: min(m.commit, r.log.last()), inSync: true}
			f.match = f.sentTo
			r.followers[from] = f
		}
	}
	r.s.cfg.Logger.Info("ffgen: took over as sequencer", "service", r.name, "epoch", t.epoch.String(),
		"commit", r.commit, "last", r.log.last(), "peers", len(t.replies))
	parked := r.parked
	r.parked = nil
	for _, e := range parked {
		if res, _ := r.write(e, nil); res != nil {
			r.s.answer(e, res)
		}
	}
	r.replicate()
	r.advanceCommit()
}

// failTakeover answers the writes that waited for it with Failover.
func (r *replica) failTakeover(why string) {
	if r.takeover == nil && len(r.parked) == 0 {
		return
	}
	r.takeover = nil
	r.s.cfg.Logger.Warn("ffgen: takeover failed", "service", r.name, "reason", why)
	parked := r.parked
	r.parked = nil
	for _, e := range parked {
		r.s.refuse(e, codeNotLeader, "could not take over as sequencer: "+why)
	}
}
