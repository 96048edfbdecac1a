package runtime

import (
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
