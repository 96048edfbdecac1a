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
