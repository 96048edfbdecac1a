package replica

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
)

// testNet connects groups in memory, each message delivered in order from
// one node to another, as over the connection between them, on a goroutine
// of the link's, as a transport's reader would; drop decides, by sender,
// receiver and raft message, what is lost.
type testNet struct {
	mu     sync.Mutex
	groups map[string]*Group
	links  map[[2]string]*testLink // by sender and receiver
	drop   func(from, to string, m *pb.Message) bool
	// hush decides, by sender and receiver, which frames that are not
	// raft messages (hellos) are lost.
	hush func(from, to string) bool
	sent map[string]map[pb.MessageType]int // raft messages sent, by receiver and type
	// appends counts the appends carrying entries sent, by receiver.
	appends map[string]int
}

type testHost struct {
	net  *testNet
	name string
}

func (h *testHost) Apply(index uint64, cmd *Command, recorded *frame.Result) (frame.Result, error) {
	if recorded != nil {
		return *recorded, nil
	}
	return frame.Result{Status: frame.StatusOK}, nil
}
func (h *testHost) SnapshotState() ([]byte, bool, error) { return nil, false, nil }
func (h *testHost) RestoreState([]byte) error            { return nil }
func (h *testHost) LeaderChanged(string, bool)           {}
func (h *testHost) CandidacyRefused([]string)            {}
func (h *testHost) Dropped([16]byte, string)             {}

func (h *testHost) Peers() []string {
	h.net.mu.Lock()
	defer h.net.mu.Unlock()
	var out []string
	for name := range h.net.groups {
		if name != h.name {
			out = append(out, name)
		}
	}
	return out
}

func (h *testHost) Send(to string, kind uint8, body []byte) error {
	n := h.net
	body = append([]byte(nil), body...)
	n.mu.Lock()
	g := n.groups[to]
	if kind == KindRaft {
		m := new(pb.Message)
		if err := proto.Unmarshal(body, m); err != nil {
			n.mu.Unlock()
			return err
		}
		if n.sent[to] == nil {
			n.sent[to] = make(map[pb.MessageType]int)
		}
		n.sent[to][m.GetType()]++
		if m.GetType() == pb.MessageType_MsgApp && len(m.GetEntries()) > 0 {
			n.appends[to]++
		}
		if n.drop != nil && n.drop(h.name, to, m) {
			n.mu.Unlock()
			return nil // lost on the way, as a cut connection loses it
		}
	}
	if kind != KindRaft && n.hush != nil && n.hush(h.name, to) {
		n.mu.Unlock()
		return nil
	}
	key := [2]string{h.name, to}
	l := n.links[key]
	if l == nil {
		l = &testLink{from: h.name, to: g}
		n.links[key] = l
	}
	n.mu.Unlock()
	l.send(kind, body)
	return nil
}

// testLink delivers one node's messages to another in order, on a
// goroutine that runs while it has some.
type testLink struct {
	from string
	to   *Group

	mu      sync.Mutex
	queue   []testMsg
	running bool
}

type testMsg struct {
	kind uint8
	body []byte
}

func (l *testLink) send(kind uint8, body []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, testMsg{kind, body})
	if !l.running {
		l.running = true
		go l.deliver()
	}
}

func (l *testLink) deliver() {
	for {
		l.mu.Lock()
		batch := l.queue
		l.queue = nil
		if len(batch) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		for _, m := range batch {
			l.to.Receive(l.from, m.kind, m.body)
		}
		l.to.Flush() // as the server does where its reader's batch ends
	}
}

func (n *testNet) setDrop(f func(from, to string, m *pb.Message) bool) {
	n.mu.Lock()
	n.drop = f
	n.mu.Unlock()
}

// sentTo counts the raft messages of type t sent to node, and resets the
// count.
func (n *testNet) sentTo(node string, t pb.MessageType) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.sent[node][t]
	delete(n.sent[node], t)
	return c
}

// startGroups forms a group of the named voters and waits for a leader.
func startGroups(t *testing.T, names ...string) (*testNet, map[string]*Group) {
	t.Helper()
	n := &testNet{groups: map[string]*Group{}, links: map[[2]string]*testLink{}, sent: map[string]map[pb.MessageType]int{}, appends: map[string]int{}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	n.mu.Lock()
	for _, name := range names {
		g, err := New(Config{
			Service: "svc", Node: name, Voters: names,
			Tick: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 3,
			RememberWrites: 1000, MaxMessageBytes: 64 << 20,
			Logger: logger, Host: &testHost{net: n, name: name},
		})
		if err != nil {
			t.Fatal(err)
		}
		n.groups[name] = g
	}
	groups := n.groups
	n.mu.Unlock()
	t.Cleanup(func() {
		for _, g := range groups {
			g.Stop()
		}
	})
	time.Sleep(3 * time.Second)
	if leaderOf(groups) == "" {
		t.Fatal("no leader after 3s")
	}
	return n, groups
}

func leaderOf(groups map[string]*Group) string {
	for name, g := range groups {
		if _, leading := g.Leader(); leading {
			return name
		}
	}
	return ""
}

// followerOf names a node of groups that does not lead.
func followerOf(groups map[string]*Group) string {
	lead := leaderOf(groups)
	for name := range groups {
		if name != lead {
			return name
		}
	}
	return ""
}

// write proposes write i, as the only one of its batch.
func write(g *Group, i int) {
	propose(g, i)
	g.Flush()
}

func propose(g *Group, i int) {
	cmd := &Command{Method: "Add", Payload: []byte{byte(i)}}
	cmd.OpID[0], cmd.OpID[1] = byte(i), byte(i>>8)
	g.Propose(cmd)
}

// Writes proposed together, as a connection's reader proposes those of
// one batch of frames, are one step of raft: each follower gets one append
// carrying all of them, not one per write, and every node applies them.
func TestWritesProposedTogetherShareOneAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := groups[leaderOf(groups)]
		// Let the new group settle (its configuration, every follower's
		// progress past the probing raft starts with) before counting.
		write(lead, 1000)
		time.Sleep(time.Second)
		write(lead, 1001)
		synctest.Wait()
		n.mu.Lock()
		clear(n.appends)
		n.mu.Unlock()
		before := lead.Applied()
		const writes = 50
		for i := range writes {
			propose(lead, i+1)
		}
		if lead.Applied() != before {
			t.Fatal("writes were applied before the batch ended")
		}
		lead.Flush()
		// A follower that refused an append raft resends after its next
		// heartbeat answer.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for name, g := range groups {
			if got := g.Applied(); got != before+writes {
				t.Errorf("%s applied up to %d, want %d", name, got, before+writes)
			}
			if g == lead {
				continue
			}
			n.mu.Lock()
			got := n.appends[name]
			n.mu.Unlock()
			// One, and one more when the test network delivered the
			// commit that followed it first: the follower refuses it then
			// and raft sends the entries again.
			if got < 1 || got > 2 {
				t.Errorf("%s got %d appends with entries for %d writes proposed together, want 1 (2 if delivered out of order)", name, got, writes)
			}
		}
	})
}

// A follower that hears the leader's heartbeats but receives none of its
// appends does not report ready for long: raft's heartbeats carry only
// the commit index the follower holds already, so before the leader's
// hellos told it the leader's own, it reported ready, applied = commit,
// and served reads without every acknowledged write. Once the appends
// flow again it catches up and is ready.
func TestFollowerWithoutAppendsReportsCatchingUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := leaderOf(groups)
		f := followerOf(groups)
		n.setDrop(func(from, to string, m *pb.Message) bool {
			return from == lead && to == f && (m.GetType() == pb.MessageType_MsgApp || m.GetType() == pb.MessageType_MsgSnap)
		})
		for i := range 50 {
			write(groups[lead], i+1)
		}
		time.Sleep(stallAfter + time.Second)
		l := groups[lead].Status()
		st := groups[f].Status()
		if st.Leader != lead {
			t.Fatalf("%s: leader %q, want %s (it hears the heartbeats)", f, st.Leader, lead)
		}
		if st.Applied >= l.Applied {
			t.Fatalf("%s applied %d, the leader %d: the appends were not cut", f, st.Applied, l.Applied)
		}
		if err := groups[f].Ready(); err == nil || !strings.Contains(err.Error(), "catching up") {
			t.Fatalf("%s, applied %d of the leader's %d: Ready() = %v, want catching up", f, st.Applied, l.Commit, err)
		}
		if groups[f].Serving() {
			t.Fatalf("%s serves while it trails the leader", f)
		}
		if st.LeaderCommit != l.Commit {
			t.Fatalf("%s: LeaderCommit %d, the leader's commit %d", f, st.LeaderCommit, l.Commit)
		}

		n.setDrop(nil)
		time.Sleep(time.Second)
		for name, g := range groups {
			if err := g.Ready(); err != nil {
				t.Errorf("%s after the appends flow again: %v", name, err)
			}
			if got := g.Applied(); got != l.Applied {
				t.Errorf("%s applied %d, want %d", name, got, l.Applied)
			}
		}
	})
}

// A burst of heartbeat answers from a follower the leader probes (held up
// by a cut, delivered at once when it heals) costs one append, not one of
// up to a megabyte each: a burst of them kept a leader's raft loop busy
// for tens of seconds, long enough for the cluster to move on without it.
func TestHeartbeatAnswersInABurstCostOneAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := leaderOf(groups)
		f := followerOf(groups)
		// The follower falls behind and the leader probes it.
		n.setDrop(func(from, to string, m *pb.Message) bool { return from == f || to == f })
		for i := range 50 {
			write(groups[lead], i+1)
		}
		time.Sleep(time.Second)
		n.setDrop(func(from, to string, m *pb.Message) bool { return to == f })
		synctest.Wait()
		n.sentTo(f, pb.MessageType_MsgApp)

		g := groups[lead]
		term := g.Status().Term
		resp, err := proto.Marshal(&pb.Message{
			Type: pb.MessageType_MsgHeartbeatResp.Enum(), From: proto.Uint64(groups[f].id),
			To: proto.Uint64(g.id), Term: proto.Uint64(term),
		})
		if err != nil {
			t.Fatal(err)
		}
		const burst = 500
		g.raftMu.Lock() // they all arrive while raft is busy
		for range burst {
			if err := g.Receive(f, KindRaft, resp); err != nil {
				t.Fatal(err)
			}
		}
		g.raftMu.Unlock()
		g.Flush()
		synctest.Wait()
		if got := n.sentTo(f, pb.MessageType_MsgApp); got != 1 {
			t.Fatalf("%d heartbeat answers in one batch: the leader sent %d appends, want 1", burst, got)
		}
	})
}

// Freeze stops raft as SIGSTOP stops a process: a leader frozen while the
// others elect another thaws still leading in its old term, and steps
// down once it hears of the newer one.
func TestFrozenLeaderThawsLeading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := leaderOf(groups)
		old := groups[lead].Status().Term
		cut := func(from, to string, _ *pb.Message) bool { return from == lead || to == lead }
		n.setDrop(cut)
		groups[lead].Freeze()
		time.Sleep(2 * time.Second)
		var next string
		for name, g := range groups {
			if _, leading := g.Leader(); leading && name != lead {
				next = name
			}
		}
		if next == "" {
			t.Fatal("no other leader while the leader was frozen")
		}
		groups[lead].Thaw()
		synctest.Wait()
		if st := groups[lead].Status(); !st.Leading || st.Term != old {
			t.Fatalf("thawed, %s: leading %v in term %d; want still leading in term %d", lead, st.Leading, st.Term, old)
		}
		n.setDrop(nil)
		testkit.Until(t, lead+" following "+next, func() bool {
			st := groups[lead].Status()
			return !st.Leading && st.Leader == next && st.Term > old
		})
	})
}
