package runtime

// Replicated writes go to their service's raft leader. A client learns the
// leader from the writes themselves: a node that is not the leader
// redirects the write there (a redirect costs no failover), and the node a
// write succeeded on is where the client sends the next one. Before it
// knows, or after that node failed, a write is routed like any operation,
// by the key below (after the leader failed, with the leader's group last:
// operation.awayFromLeader), and the node it reaches redirects it or,
// when the client failed over from the leader, stands for election at
// once.
//
// A linearizable read goes first to the leader too, when the client knows
// it: raft's ReadIndex costs the leader one heartbeat round, shared by
// every read in it, where a follower's read costs a round trip to the
// leader more, the leader's heartbeat round all the same, and a wait for
// the follower to apply what the leader had committed. At 1,024 callers
// of make overload, reads at the leader took the admitted p99 of every
// method from 30-38 ms to 18-22 ms (the reads' from 41-53 to 20-25), the
// cluster doing less for each read. Without a known leader, and on a
// failover, a read goes to its entity's owners, any of which serves it,
// passing over the leader (operation.try); trying the leader costs the
// read none of its failovers (operation.lastAttempt). A read that
// succeeded teaches the client nothing of who leads, since any node
// answers it; one that failed at the leader forgets it, as a write would.

// leaderKey routes a service's replicated writes while the client knows no
// leader: every client sends them to the same node.
func leaderKey(service string) string { return "ffgen.leader/" + service }

// leaderHint returns the member a replicated write or a linearizable read
// of service goes to first: the last node a write succeeded on, while it
// is a live member that is not suspected.
func (c *Client) leaderHint(service string) (Member, bool) {
	v, ok := c.leaders.Load(service)
	if !ok {
		return Member{}, false
	}
	name := v.(string)
	if c.nsuspect.Load() > 0 && c.suspected(name) {
		return Member{}, false
	}
	for _, m := range c.router.members(service) {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// learnLeader follows how a replicated write's attempt on node ended, for
// reason r: the node it succeeded on leads; one it failed on for a reason
// that may mean it no longer leads (it failed over, broke, timed out) is
// forgotten. A refusal for overload, the node's or this client's own
// limit's, says nothing of who leads, nor does an attempt the caller
// gave up: under overload, when refusals are many, a client that forgot
// the leader at each sent its next writes by leaderKey to a follower,
// which redirected them, an answer's round trip more on a busy node.
func (c *Client) learnLeader(service, node string, r Reason) {
	v, known := c.leaders.Load(service)
	switch r {
	case ReasonNone:
		if !known || v.(string) != node {
			c.leaders.Store(service, node)
		}
	case ReasonOverloaded, ReasonCancelled, ReasonBudget, ReasonClosed, ReasonTooLarge, ReasonQueueFull:
	default:
		if known && v.(string) == node {
			c.leaders.CompareAndDelete(service, node)
		}
	}
}
