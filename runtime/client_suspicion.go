package runtime

import (
	"context"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// A strike is a node's recent timeouts: a node that stalls once is passed
// over briefly, one that keeps stalling for longer each time.
type strike struct {
	n      int       // timeouts, each after the previous suspicion lapsed or was cleared
	last   time.Time // the latest
	silent bool      // suspected now for silence, which any frame from it disproves
}

// firstSuspicion is the first suspicion after a timeout, in heartbeat
// timeouts: long enough that the calls that start right after it go
// elsewhere instead of each waiting out the same silence, short enough
// that one stall of an otherwise healthy node (a pause of its host, a long
// GC) costs a fraction of a second of routing around it, not SuspectFor.
const firstSuspicion = 4

// suspicionFor is how long node is suspected now for why. A broken
// connection or a failed dial is strong evidence (the node is gone, or its
// host is), and lasts SuspectFor, which outlasts the membership's detection
// of a dead node. A timeout may be the stall of a live node, or of this
// client: it starts at firstSuspicion heartbeat timeouts and doubles with
// each repeat, up to SuspectFor; a node that has not timed out for
// SuspectFor starts over. Called with c.mu held.
func (c *Client) suspicionFor(node string, why Reason, now time.Time) time.Duration {
	max := c.cfg.Settings.SuspectFor
	st, ok := c.strikes[node]
	if why != ReasonHeartbeatTimeout && why != ReasonAttemptTimeout {
		if ok {
			st.silent = false
			c.strikes[node] = st
		}
		return max
	}
	if now.Sub(st.last) > max {
		st.n = 0
	}
	d := firstSuspicion * c.cfg.Settings.HeartbeatTimeout
	for i := 0; i < st.n && d < max; i++ {
		d *= 2
	}
	st.n++
	st.last = now
	st.silent = why == ReasonHeartbeatTimeout
	c.strikes[node] = st
	return min(d, max)
}

// heardFrom clears a suspicion for silence of the node at the other end of
// conn: any frame from it shows that it runs and that its connection
// carries. Other suspicions stand: a node whose handler overran is alive
// but stuck, and a frame says nothing against that. The common case,
// nobody suspected, takes no lock.
func (c *Client) heardFrom(conn transport.Conn) {
	if c.nsuspect.Load() == 0 {
		return
	}
	node := conn.Peer().Node
	c.mu.Lock()
	if st, ok := c.strikes[node]; ok && st.silent {
		st.silent = false
		c.strikes[node] = st
		delete(c.suspects, node)
		c.nsuspect.Store(int32(len(c.suspects)))
	}
	c.mu.Unlock()
}

// redirectVouches reports whether a redirect to node, which this client
// suspects, rests on fresher word than the suspicion. A node redirects to
// its group's leader only while it hears from it (within a few raft
// heartbeats, tens of milliseconds: replicated.liveLeader), so a redirect
// more than a heartbeat timeout after this client last timed out on the
// leader says that the leader ran after that. Only a suspicion for
// silence gives way: a node whose handler overran is alive but stuck, and
// one this client could not dial may still be cut off from it alone. A
// client cut off from a leader alone refused the writes the followers
// redirected to it for the rest of a suspicion that grows with each
// timeout (1.6 s after two, 6.4 s after four), after the link was back:
// most of the 3,000 to 4,000 writes a run of the fault suite's
// partition-lone row failed once dials were redialed.
//
// A redirect to a node suspected because it could not be reached is a
// reason to redial it now (retest): the leader lives, so the suspicion is
// about the way to it, and a dial tells. Refused, the writes a writer sent
// right after a partition healed waited for the background redial's
// doubling wait, up to 800 ms at the defaults (1,800 of them in 300 ms in
// one run of partition-lone); and the next node, told that the leader had
// failed, held each for an election that could not come. The redial is
// the background one's turn: no sooner than a heartbeat interval after
// the last began, so that a stream of redirects to a node still cut off
// costs one dial an interval, and the writes between are refused at once.
func (c *Client) redirectVouches(node string, heartbeatTimeout time.Duration) (vouch bool, retest *probing) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pr := c.probing[node]; pr.retests(c.suspects[node]) {
		if now := time.Now(); now.Sub(pr.last) >= c.cfg.Settings.HeartbeatInterval {
			pr.last = now
			return false, pr
		}
		return false, nil
	}
	st, ok := c.strikes[node]
	return ok && st.silent && time.Since(st.last) > heartbeatTimeout, nil
}

// unreachable suspects node, which could not be dialed or whose connection
// broke, and redials it in the background while the suspicion lasts
// (probe). Such a suspicion lasts SuspectFor, to outlast the membership's
// detection of a dead node; but a node cut off by a partition that heals
// is not dead, and the membership never says it was, so nothing else
// clears it: the writes a replicated service's followers redirected to
// their leader were refused as suspected for the rest of SuspectFor after
// the heal (6,100 of them in 2.5 s in a run of the fault suite's
// partition-lone row).
func (c *Client) unreachable(node, addr string, why Reason) {
	c.suspect(node, why)
	if why != ReasonDialFailed && why != ReasonConnBroken || addr == "" || c.closed.Load() {
		return // a TLS or protocol failure is not healed by waiting
	}
	c.mu.Lock()
	until, suspected := c.suspects[node]
	var pr *probing
	if suspected && !c.probing[node].retests(until) {
		// A probe left from an earlier suspicion ends at its next look.
		pr = &probing{until: until, last: time.Now()}
		c.probing[node] = pr
	}
	c.mu.Unlock()
	if pr != nil {
		go c.probe(node, addr, pr)
	}
}

// probing is the background redial of one suspicion of a node (probe).
type probing struct {
	// until names the suspicion, by its end: a redial that gets through
	// disproves that one, not a later one for another cause. A heartbeat
	// timeout on a node that can be dialed (a stall) is not disproved by a
	// dial.
	until time.Time
	last  time.Time // when the last dial to the node began; guarded by c.mu
}

// retests reports whether pr is the probe of the suspicion that ends at
// until. A nil pr retests nothing.
func (pr *probing) retests(until time.Time) bool {
	return pr != nil && pr.until.Equal(until)
}

// probe redials node at addr until a dial gets through, handshake
// included, which clears its suspicion; it stops sooner if the suspicion
// ends otherwise (an answer, a new join, its time, a redirect's redial)
// or the client closes. The first redial comes a heartbeat interval after
// the failure, and each one that fails doubles the wait, up to
// firstSuspicion heartbeat timeouts: a healed partition is noticed within
// about a second by default, for one dial per wait of each suspected
// node. A redial waits a heartbeat timeout at most, as an attempt's dial
// does, and skips the pool's backoff, which grows to seconds.
func (c *Client) probe(node, addr string, pr *probing) {
	s := c.cfg.Settings
	wait, most := s.HeartbeatInterval, firstSuspicion*s.HeartbeatTimeout
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-c.probes.Done():
			c.endProbe(node, pr)
			return
		case <-t.C:
		}
		if c.endProbe(node, pr) {
			return
		}
		ctx, cancel := context.WithTimeout(c.probes, s.HeartbeatTimeout)
		_, err := c.pool.Redial(ctx, addr, s.HeartbeatTimeout)
		cancel()
		if err == nil {
			c.reached(node, pr, true)
			return
		}
		wait = min(2*wait, most)
		t.Reset(wait)
	}
}

// endProbe ends pr, node's probe, once the suspicion it retests is gone
// (an answer, a new join, its time, or another suspicion after it) or the
// client closed, and reports whether it ended; else it notes that a
// redial begins now. The decision and the end are one hold of c.mu, so
// that a suspicion placed right after starts a probe of its own
// (unreachable) instead of finding this one still running.
func (c *Client) endProbe(node string, pr *probing) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.suspectedLocked(node) && pr.retests(c.suspects[node]) && c.probes.Err() == nil {
		pr.last = time.Now()
		return false
	}
	if c.probing[node] == pr {
		delete(c.probing, node)
	}
	return true
}

// reached clears the suspicion pr retests, if it still stands: a dial to
// node just got through. end ends pr too, whose own dial it was.
func (c *Client) reached(node string, pr *probing, end bool) {
	c.mu.Lock()
	cleared := c.suspectedLocked(node) && pr.retests(c.suspects[node])
	if cleared {
		// As alive: the strikes stay.
		delete(c.suspects, node)
		c.nsuspect.Store(int32(len(c.suspects)))
	}
	if end && c.probing[node] == pr {
		delete(c.probing, node)
	}
	c.mu.Unlock()
	if cleared {
		c.cfg.Logger.Info("ffgen: suspected node reachable again", "peer", node)
	}
}
