package runtime_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// Replicated state on disk (ServerConfig.DataDir): what a node or a whole
// cluster keeps across kill -9, and what it does with a directory it must
// not trust.

// durableConfig gives every node of a cluster a data directory of its own.
func durableConfig(t *testing.T, cfg fftest.Config) (fftest.Config, map[string]string) {
	t.Helper()
	dirs := map[string]string{}
	var mu sync.Mutex
	base := t.TempDir()
	prev := cfg.Server
	cfg.Server = func(node string, sc *runtime.ServerConfig) {
		mu.Lock()
		if dirs[node] == "" {
			dirs[node] = filepath.Join(base, node)
		}
		sc.DataDir = dirs[node]
		mu.Unlock()
		if prev != nil {
			prev(node, sc)
		}
	}
	return cfg, dirs
}

// Every node is killed at once, under writes, and started again: every
// acknowledged write is on every node, none ran twice, the history is
// linearizable, and a retry of a write acknowledged before the power cut
// gets its recorded result. With and without StateTransfer (a snapshot and
// the log after it, or the whole log).
func TestDurableWholeClusterRestart(t *testing.T) {
	for _, snapshots := range []bool{true, false} {
		t.Run(fmt.Sprintf("snapshots=%v", snapshots), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, _ := durableConfig(t, fftest.Config{PerGroup: 2,
					Replication: runtime.ReplicationConfig{SnapshotEvery: 16}})
				e := newReplEnv(t, cfg, snapshots)
				ctx := t.Context()
				if v, err := e.call(opCtx(ctx, 1), e.client, counterAdd, "k", 5); err != nil || v != 5 {
					t.Fatalf("first write = %d, %v", v, err)
				}
				for i := range 100 {
					if _, err := e.add(ctx, fmt.Sprintf("k%d", i%5), 1); err != nil {
						t.Fatal(err)
					}
				}
				// Writes still running when the power goes: the writer
				// whose write is the 30th acknowledged cuts it.
				var wg sync.WaitGroup
				var acked atomic.Int64
				for w := range 3 {
					wg.Go(func() {
						for range 1000 {
							if _, err := e.add(ctx, fmt.Sprintf("w%d", w), 1); err != nil {
								return
							}
							if acked.Add(1) == 30 {
								for _, n := range e.names() {
									e.Kill(t, n)
								}
							}
						}
					})
				}
				wg.Wait()
				for _, n := range e.names() {
					e.Start(t, n)
				}
				e.WaitReady(t)
				// A client that saw every node fail suspects them for a
				// while; a new one does not.
				for _, n := range e.names() {
					st := e.Node(n).Server.Replication()[0]
					if snapshots && st.SnapshotIndex == 0 {
						t.Errorf("%s restarted without a snapshot: %+v", n, st)
					}
					if st.Voters == nil || len(st.Voters) != 4 {
						t.Errorf("%s: voters %v, want the same four members", n, st.Voters)
					}
				}
				e.client = e.newClient(t)
				if v, err := e.call(opCtx(ctx, 1), e.client, counterAdd, "k", 5); err != nil || v != 5 {
					t.Fatalf("retry after the restart = %d, %v; want the recorded 5", v, err)
				}
				if _, err := e.add(ctx, "after", 1); err != nil {
					t.Fatalf("write after the restart: %v", err)
				}
				e.check(t)
				if got := e.counters["a1"].state()["k"]; got != 5 {
					t.Errorf("k = %d after the restart, want 5", got)
				}
			})
		})
	}
}

// A node killed and started again comes back as the same member with its
// state: it is not removed and added again, and it catches up on what it
// missed from the log.
func TestDurableNodeRestartsAsTheSameMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, dirs := durableConfig(t, fftest.Config{PerGroup: 2,
			Replication: runtime.ReplicationConfig{SnapshotEvery: 1000}})
		e := newReplEnv(t, cfg, true)
		ctx := t.Context()
		for i := range 20 {
			if _, err := e.add(ctx, fmt.Sprintf("k%d", i%3), 1); err != nil {
				t.Fatal(err)
			}
		}
		victim := otherThan(e.names(), e.Leader(t, counterDesc.Name))[0]
		before := e.Node(victim).Server.Replication()[0]
		e.Kill(t, victim)
		for i := range 20 {
			if _, err := e.add(ctx, fmt.Sprintf("k%d", i%3), 1); err != nil {
				t.Fatal(err)
			}
		}
		e.Start(t, victim)
		e.WaitReady(t)
		after := e.Node(victim).Server.Replication()[0]
		if after.SnapshotsInstalled != 0 {
			t.Errorf("%s needed a snapshot from its peers: %+v", victim, after)
		}
		if want := filepath.Join(dirs[victim], counterDesc.Name); after.DataDir != want {
			t.Errorf("%s reports its data in %q, want %q", victim, after.DataDir, want)
		}
		if fmt.Sprint(after.Voters) != fmt.Sprint(before.Voters) {
			t.Errorf("voters %v after the restart, %v before", after.Voters, before.Voters)
		}
		e.check(t)
	})
}

// Directories that must not be used refuse to start, naming both owners
// and the path; an unwritable directory names the path and the OS error.
func TestDurableRefusesForeignDirectories(t *testing.T) {
	dir := t.TempDir()
	register := func(cfg runtime.ServerConfig, svc *runtime.ServiceDesc) error {
		cfg.Logger = testkit.Logger(t)
		s := runtime.NewServer(cfg)
		defer s.Close()
		return s.Register(svc, newCounter(cfg.Node))
	}
	base := runtime.ServerConfig{Node: "a1", DataDir: dir, Replication: runtime.ReplicationConfig{Voters: []string{"a1"}, Cluster: "east"}}
	if err := register(base, counterDesc); err != nil {
		t.Fatalf("first start: %v", err)
	}
	other := base
	other.Node = "b1"
	other.Replication.Voters = []string{"b1"}
	err := register(other, counterDesc)
	if err == nil || !strings.Contains(err.Error(), `node "a1"`) || !strings.Contains(err.Error(), `node "b1"`) {
		t.Errorf("another node's directory: %v; want both nodes named", err)
	}
	other = base
	other.Replication.Cluster = "west"
	err = register(other, counterDesc)
	if err == nil || !strings.Contains(err.Error(), `cluster "east"`) || !strings.Contains(err.Error(), `cluster "west"`) {
		t.Errorf("another cluster's directory: %v; want both clusters named", err)
	}
	// Another service's file, put where this one's belongs.
	otherDesc := &runtime.ServiceDesc{Name: "test.Other"}
	for _, m := range counterDesc.Methods {
		c := *m
		c.Service = otherDesc.Name
		otherDesc.Methods = append(otherDesc.Methods, &c)
	}
	if err := os.Rename(filepath.Join(dir, counterDesc.Name), filepath.Join(dir, otherDesc.Name)); err != nil {
		t.Fatal(err)
	}
	err = register(base, otherDesc)
	if err == nil || !strings.Contains(err.Error(), `service "test.Counter"`) || !strings.Contains(err.Error(), `service "test.Other"`) {
		t.Errorf("another service's directory: %v; want both services named", err)
	}
	if os.Geteuid() != 0 {
		ro := t.TempDir()
		os.Chmod(ro, 0o500)
		cfg := base
		cfg.DataDir = filepath.Join(ro, "sub")
		err = register(cfg, counterDesc)
		if err == nil || !strings.Contains(err.Error(), ro) || !errors.Is(err, os.ErrPermission) {
			t.Errorf("unwritable directory: %v; want the path and the OS error", err)
		}
	}
	// A file where the directory belongs fails whoever runs the test.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	cfg := base
	cfg.DataDir = file
	err = register(cfg, counterDesc)
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a file as data directory: %v; want the path", err)
	}
}

// A corrupt data file is not trusted: the node sets it aside, logs it at
// error level, rejoins as a new member and catches up from its peers,
// with nothing acknowledged lost.
func TestDurableCorruptFileRejoinsFromPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testkit.LogBuffer
		cfg, dirs := durableConfig(t, fftest.Config{PerGroup: 2,
			Replication: runtime.ReplicationConfig{SnapshotEvery: 1000}})
		cfg.Server = wrapLogger(cfg.Server, &logs)
		e := newReplEnv(t, cfg, true)
		ctx := t.Context()
		for i := range 30 {
			if _, err := e.add(ctx, fmt.Sprintf("k%d", i%3), 1); err != nil {
				t.Fatal(err)
			}
		}
		victim := otherThan(e.names(), e.Leader(t, counterDesc.Name))[0]
		e.Kill(t, victim)
		dir := filepath.Join(dirs[victim], counterDesc.Name)
		segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
		if len(segs) == 0 {
			t.Fatalf("no log segment in %s", dir)
		}
		flipRecordBytes(t, segs[len(segs)-1])
		e.Start(t, victim)
		e.WaitReady(t)
		e.check(t)
		out := logs.String()
		if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "corrupt") {
			t.Errorf("no error-level log of the corrupt file:\n%s", out)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "corrupt-*", "wal")); len(m) != 1 {
			t.Errorf("the corrupt log was not kept aside: %v", m)
		}
	})
}

// wrapLogger sends every node's log to logs.
func wrapLogger(prev func(string, *runtime.ServerConfig), logs *testkit.LogBuffer) func(string, *runtime.ServerConfig) {
	return func(node string, sc *runtime.ServerConfig) {
		sc.Logger = logs.Logger().With("node", node)
		if prev != nil {
			prev(node, sc)
		}
	}
}

// flipRecordBytes flips bytes inside the log's records (the counter's
// keys are in every write), leaving the records' framing alone.
func flipRecordBytes(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i+2 < len(b); i++ {
		if b[i] == 'k' && b[i+1] >= '0' && b[i+1] <= '2' {
			b[i+1] ^= 0x40
			n++
		}
	}
	if n == 0 {
		t.Fatal("no record found to corrupt")
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A node the operator removed while it was down (RemoveReplica) comes
// back from its data directory believing it is a member. Its peers tell
// it that it is out: it says so, serves nothing, and stays out of the
// voters; restarted once more, it sets its state aside and joins as a new
// member, and every replica ends with the same state, no write twice.
// With and without StateTransfer (a new member gets a snapshot, or the
// whole log).
func TestDurableRemovedNodeRejoinsAsANewMember(t *testing.T) {
	for _, snapshots := range []bool{true, false} {
		t.Run(fmt.Sprintf("snapshots=%v", snapshots), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, dirs := durableConfig(t, fftest.Config{PerGroup: 2,
					Replication: runtime.ReplicationConfig{SnapshotEvery: 16}})
				e := newReplEnv(t, cfg, snapshots)
				ctx := t.Context()
				adds := func() {
					t.Helper()
					for i := range 40 {
						if _, err := e.add(ctx, fmt.Sprintf("k%d", i%3), 1); err != nil {
							t.Fatal(err)
						}
					}
				}
				adds()
				leader := e.Leader(t, counterDesc.Name)
				victim := otherThan(e.names(), leader)[0]
				e.Kill(t, victim)
				if err := e.Node(leader).Server.RemoveReplica(ctx, counterDesc.Name, victim); err != nil {
					t.Fatal(err)
				}
				adds()

				e.Start(t, victim)
				var st runtime.ReplicaStatus
				if !testkit.Within(testkit.Bound, func() bool { st = e.Node(victim).Server.Replication()[0]; return st.Removed }) {
					t.Fatalf("%s, removed while down, was never told: %+v", victim, st)
				}
				if st.Ready || !strings.Contains(st.NotReady, "removed from the group") || !strings.Contains(st.NotReady, "restart the node") {
					t.Errorf("%s once told it is out: %+v", victim, st)
				}
				adds()
				if lst := e.Node(leader).Server.Replication()[0]; slices.Contains(lst.Voters, victim) || len(lst.Voters) != 3 {
					t.Errorf("the leader's voters %v with the removed %s running", lst.Voters, victim)
				}

				e.Kill(t, victim)
				e.Start(t, victim)
				e.WaitReady(t)
				if !testkit.Within(testkit.Bound, func() bool {
					st = e.Node(victim).Server.Replication()[0]
					return st.Role == "voter" && len(st.Voters) == 4
				}) {
					t.Fatalf("%s restarted did not become a voter again: %+v", victim, st)
				}
				kept, _ := filepath.Glob(filepath.Join(dirs[victim], counterDesc.Name, "removed-*", "wal"))
				if len(kept) != 1 {
					t.Errorf("the removed member's log is not kept aside: %v", kept)
				}
				adds()
				e.check(t)
			})
		})
	}
}
