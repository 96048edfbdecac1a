package replica

import (
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// settle lets a new group finish what it starts with (its configuration,
// the followers' progress past raft's probing) and returns the leader.
func settle(t *testing.T, n *testNet, groups map[string]*Group) *Group {
	t.Helper()
	lead := groups[leaderOf(groups)]
	write(lead, 1000)
	time.Sleep(time.Second)
	synctest.Wait()
	for name := range groups {
		n.sentTo(name, pb.MessageType_MsgApp)
		n.sentTo(name, pb.MessageType_MsgAppResp)
	}
	return lead
}

// A follower answers the append that brings it a write, and not the one
// that only tells it the write committed: that answer would tell the
// leader nothing, and cost a send, a read and a step of the leader's raft
// per follower and write. The followers still hear of every commit at
// once (they apply each write before the next is proposed, with no
// heartbeat in between).
func TestCommitNoticesGoUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c", "d")
		lead := settle(t, n, groups)
		const writes = 20
		for i := range writes {
			before := lead.Applied()
			write(lead, i+1)
			synctest.Wait() // every message delivered, no timer fired
			for name, g := range groups {
				if got := g.Applied(); got != before+1 {
					t.Fatalf("write %d: %s applied up to %d, want %d", i+1, name, got, before+1)
				}
			}
		}
		leadName := leaderOf(groups)
		if got := n.sentTo(leadName, pb.MessageType_MsgAppResp); got != writes*(len(groups)-1) {
			t.Errorf("the followers answered %d appends for %d writes, want %d: one per write each", got, writes, writes*(len(groups)-1))
		}
		for name := range groups {
			if name == leadName {
				continue
			}
			if got := n.sentTo(name, pb.MessageType_MsgApp); got != 2*writes {
				t.Errorf("%s got %d appends for %d writes, want %d: the write's and its commit's", name, got, writes, 2*writes)
			}
		}
	})
}

// A follower whose answer to a write's append was lost is asked again
// (the leader's append after the follower's next heartbeat answer, which
// carries no entries) and answers, though the append carries nothing:
// with a third node cut, the write waits for that answer.
func TestLostAnswerIsAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := settle(t, n, groups)
		leadName := leaderOf(groups)
		var f, cut string
		for name := range groups {
			switch {
			case name == leadName:
			case f == "":
				f = name
			default:
				cut = name
			}
		}
		lost := false
		n.setDrop(func(from, to string, m *pb.Message) bool {
			if from == cut || to == cut {
				return true
			}
			if from == f && m.GetType() == pb.MessageType_MsgAppResp && !lost {
				lost = true
				return true
			}
			return false
		})
		before := lead.Applied()
		write(lead, 1)
		synctest.Wait()
		if !lost {
			t.Fatal("the follower did not answer the write's append")
		}
		if got := lead.Applied(); got != before {
			t.Fatalf("the leader applied up to %d without the follower's answer, want %d", got, before)
		}
		// The next heartbeat (every 30 ms), its answer, the append and
		// the answer to it.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for _, name := range []string{leadName, f} {
			if got := groups[name].Applied(); got != before+1 {
				t.Errorf("%s applied up to %d, want %d", name, got, before+1)
			}
		}
	})
}
