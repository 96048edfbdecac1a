package runtime

// Replicated writes go to their service's raft leader. A client learns the
// leader from the writes themselves: a node that is not the leader
// redirects the write there (a redirect costs no failover), and the node a
// write succeeded on is where the client sends the next one. Before it
// knows, or after that node failed, a write is routed like any operation,
// by the key below, and the node it reaches redirects it or, when the
// client failed over from the leader, stands for election at once.

// leaderKey routes a service's replicated writes while the client knows no
// leader: every client sends them to the same node.
func leaderKey(service string) string { return "ffgen.leader/" + service }

// leaderHint returns the member a replicated write of service goes to
// first: the last node one succeeded on, while it is a live member that is
// not suspected.
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
