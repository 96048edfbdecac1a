package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
)

// storeNet joins groups in one process: Send is the peer's Receive.
type storeNet struct {
	mu     sync.Mutex
	groups map[string]*Group
}

func (n *storeNet) group(name string) *Group {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.groups[name]
}

// storeHost applies writes by recording their methods in order.
type storeHost struct {
	net  *storeNet
	name string

	mu      sync.Mutex
	applied []string
}

func (h *storeHost) Apply(_ uint64, cmd *Command, recorded *frame.Result) (frame.Result, error) {
	if recorded != nil {
		return *recorded, nil
	}
	h.mu.Lock()
	h.applied = append(h.applied, cmd.Method)
	h.mu.Unlock()
	return frame.Result{Payload: []byte(cmd.Method)}, nil
}

func (h *storeHost) writes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.applied)
}

func (h *storeHost) SnapshotState() ([]byte, bool, error) { return nil, false, nil }
func (h *storeHost) RestoreState([]byte) error            { return nil }
func (h *storeHost) LeaderChanged(string, bool)           {}
func (h *storeHost) CandidacyRefused([]string)            {}
func (h *storeHost) Dropped([16]byte, string)             {}

func (h *storeHost) Peers() []string {
	var out []string
	for _, p := range []string{"a", "b", "c"} {
		if p != h.name {
			out = append(out, p)
		}
	}
	return out
}

func (h *storeHost) Send(to string, kind uint8, body []byte) error {
	g := h.net.group(to)
	if g == nil {
		return errors.New("no such peer")
	}
	err := g.Receive(h.name, kind, slices.Clone(body))
	g.Flush()
	return err
}

// failingStore fails every save while fail is set, as a full disk does.
type failingStore struct {
	store
	fail *atomic.Bool
}

var errDiskFull = errors.New("no space left on device")

func (f failingStore) save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.store.save(hs, ents, snap)
}

// isVoterLocked asks raft itself whether the node votes.
func (g *Group) isVoterLocked() bool {
	g.raftMu.Lock()
	defer g.raftMu.Unlock()
	_, ok := g.rn.Status().Config.Voters.IDs()[g.id]
	return ok
}

func otherHosts(hosts map[string]*storeHost, not string) []*storeHost {
	var out []*storeHost
	for _, name := range []string{"a", "b", "c"} {
		if name != not {
			out = append(out, hosts[name])
		}
	}
	return out
}

// A node that cannot store (a full disk) steps down, reports why, serves
// nothing of the service, and takes none of the writes made meanwhile as
// stored; once it can store again it catches up by itself, and every
// node has applied the same writes, once each, in the same order.
func TestStoreFailureStepsDownAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := &storeNet{groups: map[string]*Group{}}
		hosts := map[string]*storeHost{}
		fail := map[string]*atomic.Bool{}
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		for _, name := range []string{"a", "b", "c"} {
			h := &storeHost{net: net, name: name}
			hosts[name] = h
			cfg := Config{Service: "s.S", Node: name, Voters: []string{"a", "b", "c"}, Cluster: "test",
				Tick: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 3,
				RememberWrites: 1000, MaxMessageBytes: 1 << 20, Dir: t.TempDir(), Logger: logger, Host: h}
			fail[name] = new(atomic.Bool)
			cfg.wrapStore = func(s store) store { return failingStore{store: s, fail: fail[name]} }
			g, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(g.Stop)
			net.mu.Lock()
			net.groups[name] = g
			net.mu.Unlock()
		}
		leader := func() *Group {
			for _, name := range []string{"a", "b", "c"} {
				if _, leading := net.group(name).Leader(); leading && net.group(name).Serving() {
					return net.group(name)
				}
			}
			return nil
		}
		write := func(method string) {
			t.Helper()
			testkit.Until(t, "a leader", func() bool { return leader() != nil })
			g := leader()
			g.Propose(&Command{OpID: [16]byte{byte(len(method)), method[len(method)-1]}, Method: method})
			g.Flush()
		}
		testkit.Until(t, "a leader", func() bool { return leader() != nil })
		// The leader is the one whose disk fills.
		a := leader()
		others := otherHosts(hosts, a.cfg.Node)
		write("w1")
		testkit.Until(t, "w1 everywhere", func() bool {
			return len(hosts["a"].writes()) == 1 && len(hosts["b"].writes()) == 1 && len(hosts["c"].writes()) == 1
		})

		fail[a.cfg.Node].Store(true)
		a.Propose(&Command{OpID: [16]byte{9}, Method: "w2"})
		a.Flush()
		testkit.Until(t, "the leader to report the failure", func() bool { return a.Status().StoreFailed != "" })
		st := a.Status()
		if !strings.Contains(st.NotReady, errDiskFull.Error()) || a.Serving() || st.Leading {
			t.Errorf("%s while it cannot store: %+v, serving %v", a.cfg.Node, st, a.Serving())
		}
		// The others go on without it.
		testkit.Until(t, "a new leader", func() bool { l := leader(); return l != nil && l != a })
		for i := 3; i <= 5; i++ {
			write(fmt.Sprintf("w%d", i))
		}
		testkit.Until(t, "the writes on the others", func() bool {
			return len(others[0].writes()) >= 4 && len(others[1].writes()) >= 4
		})
		if got := hosts[a.cfg.Node].writes(); len(got) != 1 {
			t.Errorf("%s applied %v while it could not store", a.cfg.Node, got)
		}
		// Space returns.
		fail[a.cfg.Node].Store(false)
		testkit.Until(t, "the node to catch up", func() bool {
			return a.Status().NotReady == "" && len(hosts[a.cfg.Node].writes()) == len(others[0].writes())
		})
		// raft started again knows the whole configuration, not only
		// what a snapshot held.
		if v := a.Status().Voters; len(v) != 3 || !a.isVoterLocked() {
			t.Errorf("%s after recovering: voters %v", a.cfg.Node, v)
		}
		want := others[0].writes()
		for name, h := range hosts {
			if got := h.writes(); !slices.Equal(got, want) {
				t.Errorf("%s applied %v, %s %v", name, got, others[0].name, want)
			}
		}
		seen := map[string]bool{}
		for _, w := range want {
			if seen[w] {
				t.Errorf("%s applied twice: %v", w, want)
			}
			seen[w] = true
		}
	})
}

// countingHost counts the snapshots its service is asked for.
type countingHost struct {
	*storeHost
	snaps atomic.Int32
}

func (h *countingHost) SnapshotState() ([]byte, bool, error) {
	h.snaps.Add(1)
	return []byte("state"), true, nil
}

// heldStore holds every snapshot it is given until release is closed.
type heldStore struct {
	store
	release chan struct{}
}

func (h heldStore) saveSnapshot(snap *pb.Snapshot, compact uint64) error {
	<-h.release
	return h.store.saveSnapshot(snap, compact)
}

// While a snapshot is written out, the next one due waits for it, and is
// taken once it is stored: the service's state is not taken, and dropped,
// on every apply meanwhile.
func TestSnapshotWaitsForTheOneBeingStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := &storeNet{groups: map[string]*Group{}}
		h := &countingHost{storeHost: &storeHost{net: net, name: "a"}}
		release := make(chan struct{})
		cfg := Config{Service: "s.S", Node: "a", Voters: []string{"a"}, Cluster: "test",
			Tick: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 3, SnapshotEvery: 8, KeepEntries: 4,
			RememberWrites: 1000, MaxMessageBytes: 1 << 20, Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Host: h}
		cfg.wrapStore = func(s store) store { return heldStore{store: s, release: release} }
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free) // before Stop, which waits for the store
		net.groups["a"] = g
		testkit.Until(t, "a leader", func() bool { _, leading := g.Leader(); return leading && g.Serving() })
		write := func(n int) {
			t.Helper()
			g.Propose(&Command{OpID: [16]byte{byte(n), byte(n >> 8), 1}, Method: fmt.Sprint("w", n)})
			g.Flush()
			testkit.Until(t, "the write applied", func() bool { return slices.Contains(h.writes(), fmt.Sprint("w", n)) })
		}
		n := 0
		for ; h.snaps.Load() == 0; n++ {
			write(n)
		}
		for range 40 { // five snapshots' worth, while the first is held
			write(n)
			n++
		}
		if got := h.snaps.Load(); got != 1 {
			t.Fatalf("the service was asked for %d snapshots while the first was being stored, want 1", got)
		}
		free()
		synctest.Wait()
		write(n)
		testkit.Until(t, "the snapshot due taken once the first is stored", func() bool { return h.snaps.Load() == 2 })
	})
}

// The server looks writes up while snapshots are taken: the snapshot reads
// the table of remembered writes without its lock (the apply goroutine is
// its only writer), which the race detector checks here.
func TestRecordedWhileSnapshotsAreTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := &storeNet{groups: map[string]*Group{}}
		h := &countingHost{storeHost: &storeHost{net: net, name: "a"}}
		cfg := Config{Service: "s.S", Node: "a", Voters: []string{"a"}, Cluster: "test",
			Tick: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 3, SnapshotEvery: 8, KeepEntries: 4,
			RememberWrites: 1000, MaxMessageBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Host: h}
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		net.groups["a"] = g
		testkit.Until(t, "a leader", func() bool { _, leading := g.Leader(); return leading && g.Serving() })
		done, stopped := make(chan struct{}), make(chan struct{})
		var looked atomic.Int32
		go func() {
			defer close(stopped)
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, ok := g.Recorded([16]byte{0, 0, 1}); ok {
					looked.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		for n := range 40 {
			g.Propose(&Command{OpID: [16]byte{byte(n), 0, 1}, Method: fmt.Sprint("w", n)})
			g.Flush()
			testkit.Until(t, "the write applied", func() bool { return slices.Contains(h.writes(), fmt.Sprint("w", n)) })
		}
		close(done)
		<-stopped
		if h.snaps.Load() < 4 || looked.Load() == 0 {
			t.Fatalf("%d snapshots taken, %d lookups found the first write; want at least 4 and some", h.snaps.Load(), looked.Load())
		}
	})
}
