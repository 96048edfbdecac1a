package replica

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A hello under a member's name from another raft ID replaces the member
// only once the member has gone silent. The hello may be older than the
// member: one the node sent before it lost its data and came back as the
// member, read late by a node that then became leader. Replacing a live
// member for it, as the leader did, left the node out for good: it
// believed it was a member and asked to join no more, and the learner
// added in its place never answered (found by TestReplicationRandomFaults
// in runtime/, a wiped node stuck as "catching up as a learner").
func TestStaleHelloDoesNotReplaceALiveMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a1", "a2", "b1", "b2")
		lead := leaderOf(groups)
		victim := followerOf(groups)
		stale := hello{name: victim, id: 0xdead}
		hellos := func() {
			// As often as a node that has not joined says hello, for
			// longer than the two election timeouts of silence the
			// leader waits for.
			for range 12 {
				groups[lead].Receive(victim, KindHello, stale.marshal())
				time.Sleep(helloEvery)
			}
		}
		hellos()
		st := groups[lead].Status()
		if !slices.Contains(st.Voters, victim) || len(st.Learners) != 0 {
			t.Fatalf("after a hello of another self, %s's voters are %v and learners %v: a live %s was replaced", lead, st.Voters, st.Learners, victim)
		}

		// The member goes silent, as one whose node lost its data: the
		// same hellos now replace it.
		n.setDrop(func(from, to string, m *pb.Message) bool { return from == victim || to == victim })
		groups[victim].Stop()
		hellos()
		st = groups[lead].Status()
		if slices.Contains(st.Voters, victim) || !slices.Contains(st.Learners, victim) {
			t.Fatalf("after %s went silent, %s's voters are %v and learners %v: want it replaced by a learner of its new ID", victim, lead, st.Voters, st.Learners)
		}
	})
}
