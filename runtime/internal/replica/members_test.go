package replica

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/ffgen/ffgen/internal/testkit"
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

// removedNet is a storeNet whose nodes can be stopped and started again
// from their data directories.
type removedNet struct {
	*storeNet
	t     *testing.T
	dirs  map[string]string
	hosts map[string]*storeHost
}

func newRemovedNet(t *testing.T) *removedNet {
	n := &removedNet{storeNet: &storeNet{groups: map[string]*Group{}}, t: t, dirs: map[string]string{}, hosts: map[string]*storeHost{}}
	for _, name := range []string{"a", "b", "c"} {
		n.dirs[name] = t.TempDir()
		n.start(name)
	}
	return n
}

// start starts name from its data directory, with a new service: what it
// applies comes from the directory and its peers.
func (n *removedNet) start(name string) *Group {
	n.t.Helper()
	h := &storeHost{net: n.storeNet, name: name}
	g, err := New(Config{Service: "s.S", Node: name, Voters: []string{"a", "b", "c"}, Cluster: "test",
		Tick: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 3,
		RememberWrites: 1000, MaxMessageBytes: 1 << 20, Dir: n.dirs[name],
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Host: h})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(g.Stop)
	n.mu.Lock()
	n.groups[name], n.hosts[name] = g, h
	n.mu.Unlock()
	return g
}

func (n *removedNet) stop(name string) {
	n.mu.Lock()
	g := n.groups[name]
	delete(n.groups, name)
	n.mu.Unlock()
	g.Stop()
}

func (n *removedNet) leader() *Group {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range n.groups {
		if _, leading := g.Leader(); leading && g.Serving() {
			return g
		}
	}
	return nil
}

func (n *removedNet) write(method string) {
	n.t.Helper()
	testkit.Until(n.t, "a leader", func() bool { return n.leader() != nil })
	g := n.leader()
	g.Propose(&Command{OpID: [16]byte{byte(len(method)), method[len(method)-1]}, Method: method})
	g.Flush()
}

// A node removed from the group while it was down believes, restarted
// from its data directory, that it is still a member: it asked to join no
// more and waited for a leader for ever. A member tells it that it is out;
// it then says so, serves nothing, and marks its directory, so that the
// next restart sets its state aside and joins as a new member, which
// catches up with every write, once each.
func TestRemovedWhileDownRejoinsAsANewMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newRemovedNet(t)
		n.write("w1")
		testkit.Until(t, "w1 everywhere", func() bool {
			return len(n.hosts["a"].writes()) == 1 && len(n.hosts["b"].writes()) == 1 && len(n.hosts["c"].writes()) == 1
		})
		lead := n.leader()
		victim := "a"
		if lead.cfg.Node == victim {
			victim = "b"
		}
		oldID := n.group(victim).Status().ID
		n.stop(victim)
		if err := lead.Remove(t.Context(), victim); err != nil {
			t.Fatal(err)
		}
		testkit.Until(t, "the removal applied", func() bool { return len(lead.Status().Voters) == 2 })
		n.write("w2")
		term := lead.Status().Term

		g := n.start(victim)
		testkit.Until(t, victim+" told it is out", func() bool { return g.Status().Removed != "" })
		st := g.Status()
		if !strings.Contains(st.NotReady, "removed from the group") || !strings.Contains(st.NotReady, "restart the node") || g.Serving() {
			t.Errorf("%s once removed: not ready %q, serving %v", victim, st.NotReady, g.Serving())
		}
		if _, err := os.Stat(filepath.Join(n.dirs[victim], removedMark(oldID))); err != nil {
			t.Errorf("the data directory is not marked: %v", err)
		}
		time.Sleep(time.Second)
		if st := lead.Status(); !st.Leading || st.Term != term || slices.Contains(st.Voters, victim) {
			t.Errorf("the removed node disturbed the group: leader %+v, term %d before", st, term)
		}

		n.stop(victim)
		g = n.start(victim)
		testkit.Until(t, victim+" a voter again", func() bool {
			st := g.Status()
			return st.Role == "voter" && g.Serving() && len(n.hosts[victim].writes()) == 2
		})
		if st := g.Status(); st.ID == oldID || st.Removed != "" {
			t.Errorf("%s rejoined under raft ID %x (removed: %x), removed %q", victim, st.ID, oldID, st.Removed)
		}
		kept, _ := filepath.Glob(filepath.Join(n.dirs[victim], "removed-*", removedMark(oldID)))
		if len(kept) != 1 {
			t.Errorf("the removed state is not kept aside: %v", kept)
		}
		n.write("w3")
		testkit.Until(t, "w3 everywhere", func() bool {
			for _, h := range n.hosts {
				if len(h.writes()) != 3 {
					return false
				}
			}
			return true
		})
		for name, h := range n.hosts {
			if got := h.writes(); !slices.Equal(got, []string{"w1", "w2", "w3"}) {
				t.Errorf("%s applied %v", name, got)
			}
		}

		// A mark of another raft ID (a crash after the state was set
		// aside, before its mark was moved) says nothing of this one.
		stale := filepath.Join(n.dirs[victim], removedMark(oldID^1))
		if err := os.WriteFile(stale, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		newID := g.Status().ID
		n.stop(victim)
		g = n.start(victim)
		testkit.Until(t, victim+" serving again", func() bool { return g.Serving() })
		if st := g.Status(); st.ID != newID || st.Removed != "" {
			t.Errorf("%s restarted beside a stale mark: %+v", victim, st)
		}
		if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the stale mark is still there: %v", err)
		}
	})
}

// A live node removed while it was cut off learns it when the cut heals,
// from the raft messages it sends (its hellos are lost here): it stops
// and says so instead of standing for election for ever.
func TestRemovedWhileCutOffIsToldByItsPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a1", "a2", "b1", "b2")
		lead := leaderOf(groups)
		victim := followerOf(groups)
		n.mu.Lock()
		n.hush = func(from, to string) bool { return from == victim }
		n.mu.Unlock()
		n.setDrop(func(from, to string, m *pb.Message) bool { return from == victim || to == victim })
		if err := groups[lead].Remove(t.Context(), victim); err != nil {
			t.Fatal(err)
		}
		testkit.Until(t, "the removal applied", func() bool { return len(groups[lead].Status().Voters) == 3 })
		time.Sleep(time.Second)
		if st := groups[victim].Status(); st.Removed != "" || !slices.Contains(st.Voters, victim) {
			t.Fatalf("%s learnt of its removal through the cut: %+v", victim, st)
		}
		n.setDrop(nil)
		testkit.Until(t, victim+" told it is out", func() bool { return groups[victim].Status().Removed != "" })
		st := groups[victim].Status()
		if !strings.Contains(st.NotReady, "removed from the group") || groups[victim].Serving() || st.Leader != "" {
			t.Errorf("%s once told: %+v, serving %v", victim, st, groups[victim].Serving())
		}
		// Once told, it stands for election no more.
		synctest.Wait()
		n.sentTo(lead, pb.MessageType_MsgPreVote)
		time.Sleep(2 * time.Second)
		if after := n.sentTo(lead, pb.MessageType_MsgPreVote); after != 0 {
			t.Errorf("the removed node stood for election %d times once told", after)
		}
	})
}

// Remove returns once the removal is applied. Two asked at once (an
// operator removing two dead nodes) both apply: raft drops a
// configuration change proposed while another is under way, and Remove
// returned as if it had not. Asked again, a removal already applied is
// not an error.
func TestRemoveReturnsOnceApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a1", "a2", "b1", "b2", "c1")
		lead := leaderOf(groups)
		var dead []string
		for name := range groups {
			if name != lead && len(dead) < 2 {
				dead = append(dead, name)
			}
		}
		n.setDrop(func(from, to string, m *pb.Message) bool {
			return slices.Contains(dead, from) || slices.Contains(dead, to)
		})
		for _, d := range dead {
			groups[d].Stop()
		}
		errs := make(chan error, len(dead))
		for _, d := range dead {
			go func() { errs <- groups[lead].Remove(t.Context(), d) }()
		}
		for range dead {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		st := groups[lead].Status()
		for _, d := range dead {
			if slices.Contains(st.Voters, d) {
				t.Errorf("Remove(%s) returned, and the voters are %v", d, st.Voters)
			}
		}
		if err := groups[lead].Remove(t.Context(), dead[0]); err != nil {
			t.Errorf("Remove(%s) again: %v", dead[0], err)
		}
		if err := groups[lead].Remove(t.Context(), "z9"); err == nil || !strings.Contains(err.Error(), "not a member") {
			t.Errorf("Remove of a node never in the group: %v", err)
		}
	})
}

// A graceful Leave is a removal the node asked for: a member that applied
// it may say so before the node applies it itself, which must end the
// Leave, not take the node for one removed behind its back (it logged an
// error, and Leave waited until its deadline). Run several times: which
// comes first is the goroutines' order.
func TestLeaveIsNotARemovalBehindItsBack(t *testing.T) {
	for i := range 8 {
		synctest.Test(t, func(t *testing.T) {
			_, groups := startGroups(t, "a", "b", "c")
			f := followerOf(groups)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			if err := groups[f].Leave(ctx); err != nil {
				t.Fatalf("run %d: Leave: %v after %v", i, err, time.Since(start))
			}
			time.Sleep(2 * time.Second)
			if st := groups[f].Status(); st.Removed != "" {
				t.Errorf("run %d: %s left and reports %q", i, f, st.Removed)
			}
			if v := groups[leaderOf(groups)].Status().Voters; slices.Contains(v, f) {
				t.Errorf("run %d: %s left and the voters are %v", i, f, v)
			}
		})
	}
}

// A learner keeps the leader it knew: it stands for no election and sends
// raft nothing unasked. Removed while cut off, it is told once the cut
// heals, from its hello once the leader has been silent for an election
// timeout.
func TestRemovedLearnerIsTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := leaderOf(groups)
		// d's acknowledgements never reach the leader: it stays a learner.
		n.setDrop(func(from, to string, m *pb.Message) bool {
			return from == "d" && m.GetType() == pb.MessageType_MsgAppResp && !m.GetReject()
		})
		g, err := New(Config{
			Service: "svc", Node: "d", Voters: []string{"a", "b", "c"},
			Tick: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 3,
			RememberWrites: 1000, MaxMessageBytes: 64 << 20,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Host: &testHost{net: n, name: "d"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		n.mu.Lock()
		n.groups["d"] = g
		n.mu.Unlock()
		testkit.Until(t, "d a learner that knows the leader", func() bool {
			st := g.Status()
			return st.Role == "learner" && st.Leader != ""
		})
		n.setDrop(func(from, to string, m *pb.Message) bool { return from == "d" || to == "d" })
		n.mu.Lock()
		n.hush = func(from, to string) bool { return from == "d" || to == "d" }
		n.mu.Unlock()
		if err := groups[lead].Remove(t.Context(), "d"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		n.setDrop(nil)
		n.mu.Lock()
		n.hush = nil
		n.mu.Unlock()
		testkit.Until(t, "the removed learner told it is out", func() bool { return g.Status().Removed != "" })
		if st := g.Status(); st.Role != "" || !strings.Contains(st.NotReady, "removed from the group") {
			t.Errorf("the learner once told: role %q, not ready %q", st.Role, st.NotReady)
		}
	})
}
