package runtime

import "testing"

// A client keeps the leader it learned through refusals for overload and
// attempts its caller gave up, which say nothing of who leads, and
// forgets it when an attempt there failed in a way that may mean it no
// longer does. Under overload a client that forgot it at every refusal
// sent its next writes to a follower, which redirected each.
func TestLeaderIsKeptThroughRefusals(t *testing.T) {
	c := &Client{}
	leader := func() string {
		v, ok := c.leaders.Load("bank")
		if !ok {
			return ""
		}
		return v.(string)
	}
	c.learnLeader("bank", "b1", ReasonNone)
	if got := leader(); got != "b1" {
		t.Fatalf("after a write succeeded on b1: leader %q", got)
	}
	for _, r := range []Reason{ReasonOverloaded, ReasonCancelled, ReasonBudget, ReasonClosed, ReasonTooLarge, ReasonQueueFull} {
		c.learnLeader("bank", "b1", r)
		if got := leader(); got != "b1" {
			t.Errorf("after an attempt on b1 ended %v: leader %q, want b1 kept", r, got)
		}
	}
	c.learnLeader("bank", "a1", ReasonHeartbeatTimeout) // another node failed: b1 still leads
	if got := leader(); got != "b1" {
		t.Errorf("after an attempt on a1 timed out: leader %q, want b1", got)
	}
	for _, r := range []Reason{ReasonHeartbeatTimeout, ReasonAttemptTimeout, ReasonConnBroken, ReasonDialFailed, ReasonFailoverError, ReasonSuspected, ReasonDeadline} {
		c.learnLeader("bank", "b1", ReasonNone)
		c.learnLeader("bank", "b1", r)
		if got := leader(); got != "" {
			t.Errorf("after an attempt on b1 ended %v: leader %q, want forgotten", r, got)
		}
	}
}

// A write that failed at its leader fails over along its key's groups
// with the leader's group last, wherever the key's order put it, with
// two groups or more.
func TestFailoverLeavesTheLeadersGroupFirst(t *testing.T) {
	groups := []string{"a", "b", "c"}
	c := &Client{router: newRouter(groups)}
	order := []int{2, 0, 1} // the key's order: c, a, b
	for _, tc := range []struct {
		leader string
		want   string // the groups of failovers 1, 2, 3, 4
	}{
		{"c", "abca"},
		{"a", "cbac"},
		{"b", "cabc"},
		{"x", "abca"}, // not a group of the key's: the key's order from its second
	} {
		op := &operation{c: c, leader: Member{Name: "n", Group: tc.leader}}
		got := ""
		for k := range 4 {
			got += groups[op.awayFromLeader(order, k)]
		}
		if got != tc.want {
			t.Errorf("leader in group %s: failovers go to %s, want %s", tc.leader, got, tc.want)
		}
	}
}
