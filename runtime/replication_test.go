package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
)

// The sequences that lost, doubled or skipped acknowledged writes under
// the replication protocol raft replaced, each as a deterministic test
// over the in-memory network. Every test ends with the same check
// (replEnv.check): the replicas hold the same state, no write ran twice,
// and the history of every call is linearizable.

// opCtx gives a call a fixed operation ID, as a caller that retries does.
func opCtx(ctx context.Context, n byte) context.Context {
	var id [16]byte
	id[0], id[15] = 0xf0, n
	return runtime.WithOperationID(context.WithValue(ctx, testOpID{}, n), id)
}

// clientOf returns a client on the side of a partition with the named
// nodes: it sees only them, and the network cuts it from the others.
func (e *replEnv) clientOf(t *testing.T, names ...string) *runtime.Client {
	t.Helper()
	return e.clientOfWith(t, func(*runtime.ClientConfig) {}, names...)
}

// clientOfWith is clientOf with modify applied to its configuration last.
func (e *replEnv) clientOfWith(t *testing.T, modify func(*runtime.ClientConfig), names ...string) *runtime.Client {
	t.Helper()
	view := runtime.NewStaticMembership()
	var ms []runtime.Member
	for _, m := range e.Members.Members() {
		for _, n := range names {
			if m.Name == n {
				ms = append(ms, m)
			}
		}
	}
	view.Set(ms)
	c := e.newClient(t, func(cfg *runtime.ClientConfig) {
		cfg.Membership = view
		// Sides of a partition see some groups empty: enough failovers
		// to come round to a node they see.
		cfg.Settings.MaxFailovers = 3
		cfg.Settings.Groups = clientGroups(cfg.Settings.Groups)
		modify(cfg)
	})
	for _, other := range otherThan(e.names(), names...) {
		e.Net.CutBoth(e.lastClient(), other)
	}
	return c
}

// clientGroups drops the tie-breakers' group: no client routes there.
func clientGroups(groups []string) []string {
	var out []string
	for _, g := range groups {
		if g != "t" {
			out = append(out, g)
		}
	}
	return out
}

func otherThan(names []string, not ...string) []string {
	var out []string
	for _, n := range names {
		skip := false
		for _, x := range not {
			skip = skip || n == x
		}
		if !skip {
			out = append(out, n)
		}
	}
	return out
}

func (e *replEnv) names() []string {
	var out []string
	for _, n := range e.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// Raft's Figure 8: a leader logs a write it cannot replicate and is cut
// off; another leader logs a different write at the same index; the first
// comes back, and the caller of its write retries with the same operation
// ID. Under the replaced protocol the first write was acknowledged and
// then undone, and the second, whose caller was told it failed, applied.
// Here the write is acknowledged once, applied once on every replica, and
// the other stays.
func TestReplicationFigure8(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplEnv(t, fftest.Config{Groups: []string{"a", "b", "c"}}, false)
		ctx := t.Context()
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		p := e.Leader(t, counterDesc.Name)
		// P logs W1 and is cut off before any follower holds it.
		e.Net.Isolate(p)
		w1 := e.clientOf(t, p)
		w1done := make(chan error, 1)
		go func() {
			_, err := e.call(opCtx(ctx, 1), w1, counterAdd, "k", 10)
			w1done <- err
		}()
		synctest.Wait()
		// Q takes over with R and commits W2 at the same index.
		rest := otherThan(e.names(), p)
		q := e.clientOf(t, rest...)
		if _, err := e.call(ctx, q, counterAdd, "k", 100); err != nil {
			t.Fatalf("W2 on the majority side: %v", err)
		}
		err := <-w1done
		if err == nil {
			t.Fatal("W1 was acknowledged by a leader cut off from every follower")
		}
		// P comes back; W1's caller retries with the same ID, through
		// any node.
		e.Net.Rejoin(p)
		for i := 0; ; i++ {
			if _, err = e.call(opCtx(ctx, 1), e.client, counterAdd, "k", 10); err == nil || i == 20 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("W1 retried after the cut healed: %v", err)
		}
		// And once more, as a client unsure of the answer would.
		if v, err := e.call(opCtx(ctx, 1), e.client, counterAdd, "k", 10); err != nil || v != 111 {
			t.Fatalf("W1's retry = %d, %v; want its recorded result 111", v, err)
		}
		e.check(t)
		if got := e.counters[p].state()["k"]; got != 111 {
			t.Errorf("k = %d on %s, want 111: W1 and W2 once each", got, p)
		}
	})
}

// A lone node cut off with a client beside it commits nothing: its
// quorum is a majority of the configured voters, never of the nodes it can
// see. The writes of the other side stay when the cut heals.
func TestReplicationLoneNodeCommitsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		for _, lone := range []string{e.Leader(t, counterDesc.Name), "b2"} {
			e.Net.Isolate(lone)
			alone := e.clientOf(t, lone)
			others := e.clientOf(t, otherThan(e.names(), lone)...)
			var wg sync.WaitGroup
			for i := range 3 {
				wg.Go(func() {
					if _, err := e.call(ctx, alone, counterAdd, "k", 1000); err == nil {
						t.Errorf("write %d acknowledged by %s, cut off alone", i, lone)
					}
				})
				wg.Go(func() {
					if _, err := e.call(ctx, others, counterAdd, "k", 1); err != nil {
						t.Errorf("write %d on the majority side: %v", i, err)
					}
				})
			}
			wg.Wait()
			// Reads on the lone node stop once it knows no leader.
			time.Sleep(2 * e.Settings.HeartbeatTimeout)
			if _, err := e.call(ctx, alone, counterGet, "k", 0); err == nil || runtime.MaybeExecuted(err) {
				t.Errorf("read on %s, cut off: %v; want a refusal", lone, err)
			}
			e.Net.Rejoin(lone)
			e.check(t)
		}
	})
}

// A client cut off from the leader alone suspects it for its silence, for
// longer with each timeout. Once the link is back, the followers, which
// heard from the leader all along, redirect the client's writes to it, and
// the client follows them rather than refuse the writes as suspected for
// the rest of its suspicion: the followers' word is the fresher.
func TestRedirectOverrulesAnOlderSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx, c, leader := clientOfTheLeader(t)
		e.Net.CutBoth(e.lastClient(), leader)
		// Two timeouts on the leader: suspected for four heartbeat
		// timeouts, then eight.
		for range 2 {
			e.call(ctx, c, counterAdd, "k", 1)
			for c.Suspected(leader) {
				time.Sleep(e.Settings.HeartbeatInterval)
			}
		}
		e.call(ctx, c, counterAdd, "k", 1)
		if !c.Suspected(leader) {
			t.Fatalf("%s, cut off from the client, not suspected", leader)
		}
		e.Net.Heal(e.lastClient(), leader)
		time.Sleep(2 * e.Settings.HeartbeatTimeout)
		if !c.Suspected(leader) {
			t.Fatalf("%s no longer suspected %v after the third timeout: the test needs a longer suspicion", leader, 2*e.Settings.HeartbeatTimeout)
		}
		if _, err := e.call(ctx, c, counterAdd, "k", 1); err != nil {
			t.Fatalf("write after the link was back: %v", err)
		}
		if c.Suspected(leader) {
			t.Errorf("%s still suspected after it answered", leader)
		}
		e.check(t)
	})
}

// A redirect to a node this client could not reach, from a node that
// hears from it, is followed with a dial: the suspicion is about the way
// to the node, and the dial tells whether it is back. Refused, the first
// write after a partition between a client and its leader healed failed
// after 750 ms: the next node, told that the leader had failed, held it
// for an election that could not come.
func TestRedirectRedialsAnUnreachableLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx, c, leader := clientOfTheLeader(t)
		e.Net.CutBoth(e.lastClient(), leader)
		e.Net.Reset(e.lastClient(), leader)
		synctest.Wait()
		// Long enough for the background redial's wait to reach its
		// longest.
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			if _, err := e.call(ctx, c, counterAdd, "k", 1); err == nil {
				t.Fatalf("write acknowledged while the client was cut off from the leader %s", leader)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !c.Suspected(leader) {
			t.Fatalf("%s, cut off from the client, not suspected", leader)
		}
		e.Net.Heal(e.lastClient(), leader)
		start := time.Now()
		if _, err := e.call(ctx, c, counterAdd, "k", 1); err != nil {
			t.Fatalf("first write after the link was back: %v", err)
		}
		if took := time.Since(start); took >= e.Settings.HeartbeatTimeout {
			t.Errorf("first write after the link was back took %v, a heartbeat timeout or more", took)
		}
		if c.Suspected(leader) {
			t.Errorf("%s still suspected after it answered", leader)
		}
		e.check(t)
	})
}

// hidingView is a node's membership that leaves one member out, as a
// node's view does while gossip has not yet told it that a member which
// restarted is back.
type hidingView struct {
	runtime.Membership
	hide atomic.Pointer[string]
}

func (v *hidingView) filter(ms []runtime.Member) []runtime.Member {
	h := v.hide.Load()
	if h == nil {
		return ms
	}
	var out []runtime.Member
	for _, m := range ms {
		if m.Name != *h {
			out = append(out, m)
		}
	}
	return out
}

func (v *hidingView) Members() []runtime.Member { return v.filter(v.Membership.Members()) }

func (v *hidingView) Subscribe(fn func([]runtime.Member)) func() {
	return v.Membership.Subscribe(func(ms []runtime.Member) { fn(v.filter(ms)) })
}

// A follower whose membership does not list the leader (it restarted and
// won an election before gossip said it was back) still sends writes on
// to it: raft hears from the leader, and the follower knows its address
// from when the membership last listed it. Found among the live members
// only, the leader was "not a live member here": the follower stood for
// an election it could not win, held the write, and refused it.
func TestLeaderMissingFromTheViewTakesRedirects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		views := map[string]*hidingView{}
		e := newReplEnv(t, fftest.Config{PerGroup: 2, Server: func(node string, cfg *runtime.ServerConfig) {
			v := &hidingView{Membership: cfg.Membership}
			views[node], cfg.Membership = v, v
		}}, false)
		ctx := t.Context()
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		leader := e.Leader(t, counterDesc.Name)
		follower := otherThan(e.names(), leader)[0]
		views[follower].hide.Store(&leader)
		c := e.clientOf(t, follower)
		e.Net.Heal(e.lastClient(), leader) // clientOf cut it off from the others
		if _, err := e.call(ctx, c, counterAdd, "k", 1); err != nil {
			t.Fatalf("write through %s, whose view does not list the leader %s: %v", follower, leader, err)
		}
		e.check(t)
	})
}

// A 2|2 partition of four voters along the failure groups, writers on both
// sides: neither side has a majority, so neither commits; after the heal
// nothing acknowledged is missing anywhere.
func TestReplicationPartitionTwoTwo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		cut(e, []string{"a1", "a2"}, []string{"b1", "b2"})
		var wg sync.WaitGroup
		for _, side := range [][]string{{"a1", "a2"}, {"b1", "b2"}} {
			c := e.clientOf(t, side...)
			for i := range 3 {
				wg.Go(func() {
					if _, err := e.call(ctx, c, counterAdd, "k", 10); err == nil {
						t.Errorf("write %d acknowledged on side %v without a majority of the voters", i, side)
					}
				})
			}
		}
		wg.Wait()
		e.Net.HealAll()
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatalf("write after the heal: %v", err)
		}
		e.check(t)
	})
}

// With a tie-breaker (a voter in a third place, routed to by no client),
// two failure groups keep taking writes when either group is lost: the
// group left and the tie-breaker are a majority. The lost group commits
// nothing meanwhile.
func TestReplicationTieBreakerSurvivesAGroup(t *testing.T) {
	for _, lost := range []string{"a1", "b1"} {
		t.Run("lose "+lost, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newReplEnv(t, fftest.Config{Groups: []string{"a", "b", "t"},
					Server: func(node string, cfg *runtime.ServerConfig) {
						cfg.Replication.TieBreaker = node == "t1"
						cfg.Settings.Groups = []string{"a", "b"} // where clients go
					}}, false)
				ctx := t.Context()
				e.client = e.clientOf(t, "a1", "b1")
				if _, err := e.add(ctx, "k", 1); err != nil {
					t.Fatal(err)
				}
				// A tie-breaker that wins an election hands leadership over.
				if !testkit.Within(2*time.Second, func() bool { return e.Leader(t, counterDesc.Name) != "t1" }) {
					t.Fatal("the tie-breaker still leads")
				}
				kept := otherThan([]string{"a1", "b1"}, lost)[0]
				cut(e, []string{lost}, []string{kept, "t1"})
				keptC, lostC := e.clientOf(t, kept), e.clientOf(t, lost)
				var wg sync.WaitGroup
				for i := range 3 {
					wg.Go(func() {
						// A leader change under way may leave a write's
						// outcome open: its caller retries it with its
						// operation ID, as any caller may.
						var err error
						for try := 0; try < 3; try++ {
							if _, err = e.call(opCtx(ctx, byte(20+i)), keptC, counterAdd, "k", 1); err == nil {
								break
							}
						}
						if err != nil {
							t.Errorf("write %d with a majority (%s t1): %v", i, kept, err)
						}
					})
					wg.Go(func() {
						if _, err := e.call(ctx, lostC, counterAdd, "k", 1000); err == nil {
							t.Errorf("write %d acknowledged by %s alone", i, lost)
						}
					})
				}
				wg.Wait()
				if l := e.Leader(t, counterDesc.Name); l != kept {
					t.Errorf("leader %s, want %s: a tie-breaker votes but does not lead", l, kept)
				}
				e.Net.HealAll()
				e.check(t)
			})
		})
	}
}

// clientOfTheLeader returns four voters that took a write, and a new
// client that has written through their leader, named.
func clientOfTheLeader(t *testing.T) (*replEnv, context.Context, *runtime.Client, string) {
	t.Helper()
	e, ctx := fourNodesWithAWrite(t)
	leader := e.Leader(t, counterDesc.Name)
	c := e.newClient(t)
	if _, err := e.call(ctx, c, counterAdd, "k", 1); err != nil {
		t.Fatal(err)
	}
	return e, ctx, c, leader
}

// fourNodesWithAWrite starts a 4-node cluster (a1 a2 | b1 b2) serving the
// counter, and writes k = 1 through it: the group has formed and elected.
func fourNodesWithAWrite(t *testing.T) (*replEnv, context.Context) {
	t.Helper()
	e := newReplEnv(t, fftest.Config{PerGroup: 2}, false)
	ctx := t.Context()
	if _, err := e.add(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	return e, ctx
}

// cut separates two sides of the cluster both ways.
func cut(e *replEnv, left, right []string) {
	for _, l := range left {
		for _, r := range right {
			e.Net.CutBoth(l, r)
		}
	}
}

// A declared error with the failover directive, returned by a replicated
// write's handler on every node, is that write's result everywhere: the
// caller gets it (errors.Is), and the service goes on. Under the replaced
// protocol it wedged every node ("write 4 did not apply here").
func TestReplicationFailoverErrorIsTheResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplEnv(t, fftest.Config{PerGroup: 2}, false)
		ctx := t.Context()
		for _, c := range e.counters {
			c.setHook(func(_ context.Context, key string) error {
				if key == "busy" {
					return errCounterBusy
				}
				return nil
			})
		}
		_, err := e.add(ctx, "busy", 1)
		if !errors.Is(err, errCounterBusy) {
			t.Fatalf("write = %v, want the declared ErrCounterBusy", err)
		}
		var re *runtime.Error
		if errors.As(err, &re) {
			t.Errorf("write = %v: failed over, want the handler's error as the final answer", err)
		}
		if v, err := e.add(ctx, "k", 5); err != nil || v != 5 {
			t.Fatalf("next write = %d, %v", v, err)
		}
		for _, n := range e.Nodes {
			if err := n.Server.Ready(); err != nil {
				t.Errorf("%s not ready after a declared error: %v", n.Name, err)
			}
		}
		e.check(t)
	})
}

// An entry one replica cannot apply stops that replica's apply at that
// index: it is never counted as applied, the node says why and is not
// ready, and the others go on.
func TestReplicationUnappliableEntryStopsTheReplica(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(e *replEnv, node string)
		why    string
	}{
		{"panic", func(e *replEnv, node string) {
			e.counters[node].setHook(func(_ context.Context, key string) error {
				if key == "bad" {
					panic("cannot apply")
				}
				return nil
			})
		}, "panicked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, ctx := fourNodesWithAWrite(t)
				leader := e.Leader(t, counterDesc.Name)
				victim := otherThan(e.names(), leader)[0]
				tc.break_(e, victim)
				if _, err := e.add(ctx, "bad", 1); err != nil {
					t.Fatalf("write that %s cannot apply: %v", victim, err)
				}
				if _, err := e.add(ctx, "k", 1); err != nil {
					t.Fatal(err)
				}
				healthy := otherThan(e.names(), victim)
				e.WaitConverged(t, healthy...)
				var st runtime.ReplicaStatus
				testkit.Within(time.Second, func() bool { st = e.Node(victim).Server.Replication()[0]; return st.Stopped })
				if !st.Stopped || st.Ready || !strings.Contains(st.NotReady, tc.why) || !strings.Contains(st.NotReady, fmt.Sprintf("write %d", st.Applied+1)) {
					t.Fatalf("%s: %+v; want stopped at the write after its applied index, saying %q", victim, st, tc.why)
				}
				if err := e.Node(victim).Server.Ready(); err == nil {
					t.Errorf("%s is ready with a write it could not apply", victim)
				}
				if got := e.counters[victim].state()["bad"]; got != 0 {
					t.Errorf("bad = %d on %s", got, victim)
				}
				// Reads there are refused, not served from a state that
				// lacks a write.
				if _, err := e.call(ctx, e.clientOf(t, victim), counterGet, "k", 0); err == nil || runtime.MaybeExecuted(err) {
					t.Errorf("read on the stopped %s: %v, want a refusal", victim, err)
				}
				e.check(t, healthy...)
			})
		})
	}
}

// A node restored from a snapshot knows the operation IDs the snapshot
// covers: a retry of a write acknowledged long before gets the recorded
// result from it, and runs nowhere again. Under the replaced protocol the
// retry ran again on every replica (balance 2 after one +1).
func TestReplicationSnapshotCarriesOperationIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplEnv(t, fftest.Config{Groups: []string{"a", "b", "c"},
			Replication: runtime.ReplicationConfig{SnapshotEvery: 8}}, true)
		ctx := t.Context()
		v, err := e.call(opCtx(ctx, 1), e.client, counterAdd, "k", 1)
		if err != nil || v != 1 {
			t.Fatalf("write = %d, %v", v, err)
		}
		for range 40 {
			if _, err := e.add(ctx, "other", 1); err != nil {
				t.Fatal(err)
			}
		}
		// c1 restarts empty: a new member, which gets the state as a
		// snapshot (the log before it is gone).
		leader := e.Leader(t, counterDesc.Name)
		victim := otherThan(e.names(), leader)[0]
		e.Restart(t, victim) // the service's constructor makes its counter anew
		e.WaitConverged(t)
		st := e.Node(victim).Server.Replication()[0]
		if st.SnapshotsInstalled == 0 {
			t.Fatalf("%s caught up without a snapshot: %+v", victim, st)
		}
		// The retry reaches the restarted node first.
		if v, err := e.call(opCtx(ctx, 1), e.clientOf(t, victim), counterAdd, "k", 1); err != nil || v != 1 {
			t.Fatalf("retry on %s = %d, %v; want the recorded 1", victim, v, err)
		}
		// And the restarted node leads: it applies a retry as the record.
		e.Net.Isolate(leader)
		if v, err := e.call(opCtx(ctx, 1), e.clientOf(t, otherThan(e.names(), leader)...), counterAdd, "k", 1); err != nil || v != 1 {
			t.Fatalf("retry without the old leader = %d, %v; want the recorded 1", v, err)
		}
		e.Net.Rejoin(leader)
		e.check(t)
		if got := e.counters[victim].state()["k"]; got != 1 {
			t.Errorf("k = %d on the restored %s, want 1", got, victim)
		}
	})
}

// A service without StateTransfer keeps its whole log: a node restarted
// empty replays it from the first write and becomes ready, saying so.
// Under the replaced protocol it stayed "waiting to compare with peers".
func TestReplicationRestartWithoutStateTransfer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplEnv(t, fftest.Config{PerGroup: 2,
			Replication: runtime.ReplicationConfig{SnapshotEvery: 8}}, false)
		ctx := t.Context()
		for i := range 200 {
			if _, err := e.add(ctx, fmt.Sprintf("k%d", i%7), 1); err != nil {
				t.Fatal(err)
			}
		}
		victim := otherThan(e.names(), e.Leader(t, counterDesc.Name))[0]
		e.counters[victim] = newCounter(victim)
		start := time.Now()
		e.Restart(t, victim)
		e.WaitConverged(t)
		st := e.Node(victim).Server.Replication()[0]
		if st.SnapshotsInstalled != 0 || st.LogFirst != 1 {
			t.Errorf("%s: %+v; want the whole log replayed, no snapshot", victim, st)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s took %s to catch up", victim, took)
		}
		e.check(t)
	})
}

// A write whose arguments a follower cannot decode (a rolling deploy that
// changed the request) stops that follower's apply there; it is never
// counted as applied.
func TestReplicationUndecodableEntryStopsTheReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		newer := &runtime.MethodDesc{}
		*newer = *counterAdd
		newer.NewArgs = func() codec.Message { return new(testledger.TransferArgs) } // reads a field more
		e := &replEnv{counters: map[string]*counter{}}
		// b2 runs the newer build. It never leads (a tie-breaker), so
		// every write reaches it through the log, and no client calls it.
		e.Cluster = fftest.New(t, fftest.Config{PerGroup: 2, Server: func(node string, cfg *runtime.ServerConfig) {
			cfg.Replication.TieBreaker = node == "b2"
		}})
		for _, n := range e.Nodes {
			c := newCounter(n.Name)
			e.counters[n.Name] = c
			desc := counterDesc
			if n.Name == "b2" {
				desc = &runtime.ServiceDesc{Name: counterDesc.Name, Methods: []*runtime.MethodDesc{newer, counterGet, counterReadNow}}
			}
			if err := n.Server.Register(desc, c); err != nil {
				t.Fatal(err)
			}
		}
		announce(e)
		e.WaitReady(t)
		e.client = e.clientOf(t, "a1", "a2", "b1")
		ctx := t.Context()
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		var st runtime.ReplicaStatus
		testkit.Within(5*time.Second, func() bool { st = e.Node("b2").Server.Replication()[0]; return st.Stopped })
		if !st.Stopped || !strings.Contains(st.NotReady, "do not decode") {
			t.Fatalf("b2: %+v; want stopped at the write it cannot decode", st)
		}
		if got := e.counters["b2"].state()["k"]; got != 0 {
			t.Errorf("k = %d on b2", got)
		}
		e.check(t, "a1", "a2", "b1")
	})
}

// announce lists every node of a cluster whose services were registered
// by hand as serving the counter.
func announce(e *replEnv) {
	var ms []runtime.Member
	for _, n := range e.Nodes {
		ms = append(ms, runtime.Member{Name: n.Name, Group: n.Group, Addr: n.Name, Services: []string{counterDesc.Name}})
	}
	e.Members.Set(ms)
}

// A node that is shutting down refuses reads at once, before it leaves
// the group; a linearizable read on any node sees every acknowledged
// write.
func TestReplicationReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		leader := e.Leader(t, counterDesc.Name)
		for _, n := range e.Nodes {
			// A follower that has not heard of the write yet would
			// answer a default read with 0; ReadNow waits for it.
			if n.Name != leader {
				e.Net.Delay(leader, n.Name, 50*time.Millisecond)
			}
		}
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		for _, n := range otherThan(e.names(), leader) {
			v, err := e.call(ctx, e.clientOf(t, n), counterReadNow, "k", 0)
			if err != nil || v != 2 {
				t.Errorf("ReadNow on %s = %d, %v; want 2", n, v, err)
			}
		}
		e.Net.HealAll()
		// Draining: b2 serves no read from the moment Shutdown starts,
		// as nothing it answers could be vouched for; this reader
		// reaches no leader it could pass them on to.
		draining := "b2"
		reader := e.clientOf(t, draining)
		done := make(chan struct{})
		go func() {
			e.Node(draining).Server.Shutdown(context.Background())
			close(done)
		}()
		synctest.Wait()
		if _, err := e.call(ctx, reader, counterGet, "k", 0); err == nil || runtime.MaybeExecuted(err) {
			t.Errorf("read on draining %s: %v; want a refusal", draining, err)
		}
		<-done
		rest := otherThan(e.names(), draining)
		e.Members.Set(slicesDeleteMember(e.Members.Members(), draining))
		st := e.Node(rest[0]).Server.Replication()[0]
		if slices.Contains(st.Voters, draining) {
			t.Errorf("%s still a voter after a graceful stop: %+v", draining, st)
		}
		e.check(t, rest...)
	})
}

// trail is a cluster whose follower trails its leader (trailingFollower).
type trail struct {
	e                     *replEnv
	ctx                   context.Context
	key, follower, leader string
	release               func() // lets the follower apply again
}

// trailingFollower makes a follower of a four-node cluster fall more
// writes behind the leader than it may and still take reads: its apply
// blocks at a write of key, which it owns first, until release is
// called, and 1,001 writes follow. Before them, hold (if not nil) is
// called, and the test waits until what it started blocks.
func trailingFollower(t *testing.T, hold func(tr *trail)) *trail {
	t.Helper()
	tr := &trail{}
	tr.e, tr.ctx = fourNodesWithAWrite(t)
	e := tr.e
	tr.leader = e.Leader(t, counterDesc.Name)
	for i := 0; tr.key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); e.Owners(counterDesc.Name, k)[0] != tr.leader {
			tr.key = k
		}
	}
	tr.follower = e.Owners(counterDesc.Name, tr.key)[0]
	released := make(chan struct{})
	tr.release = func() { close(released) }
	e.counters[tr.follower].setHook(func(_ context.Context, k string) error {
		if k == tr.key {
			<-released
		}
		return nil
	})
	if _, err := e.add(tr.ctx, tr.key, 1); err != nil {
		t.Fatal(err)
	}
	if hold != nil {
		hold(tr)
		synctest.Wait()
	}
	const behind = 1001
	for range behind {
		if _, err := e.add(tr.ctx, "other", 1); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait()
	st := e.Node(tr.follower).Server.Replication()[0]
	if !strings.Contains(st.NotReady, "catching up") {
		t.Fatalf("%s, %d writes behind, reports %q; the test needs it catching up", tr.follower, behind, st.NotReady)
	}
	return tr
}

// A linearizable read a follower holds until it has applied what the
// leader had committed when the read arrived is served then, though the
// follower came to trail the leader meanwhile by more than it may to take
// new reads: its state holds every write committed before the read. The
// follower refused it, as it would a read arriving then; in the fault
// suite's leader-stop, followers refused reads a new leader had confirmed
// in the same way, and those went on to the frozen leader and failed.
func TestReplicationConfirmedReadIsServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type read struct {
			v   int64
			err error
		}
		got := make(chan read, 1)
		tr := trailingFollower(t, func(tr *trail) {
			reader := tr.e.clientOfWith(t, func(cfg *runtime.ClientConfig) { cfg.Settings.MaxFailovers = 0 }, tr.follower)
			go func() {
				v, err := tr.e.call(tr.ctx, reader, counterReadNow, tr.key, 0)
				got <- read{v, err}
			}()
		})
		tr.release()
		r := <-got
		if r.err != nil || r.v != 1 {
			t.Errorf("ReadNow of %s on %s = %d, %v; want 1, served", tr.key, tr.follower, r.v, r.err)
		}
		tr.e.check(t)
	})
}

// A node too far behind the leader to serve passes reads on to the
// leader, as it does writes, at no cost of a failover. It refused them:
// in the fault suite's leader-stop, a node thawed from a freeze and
// catching up refused reads that had failed over from the frozen leader
// after it, and with the default one failover they failed beside a new
// leader.
func TestReplicationCatchingUpNodeRedirectsReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := trailingFollower(t, nil)
		e := tr.e
		reader := e.clientOfWith(t, func(cfg *runtime.ClientConfig) { cfg.Settings.MaxFailovers = 0 }, tr.follower, tr.leader)
		for _, m := range []*runtime.MethodDesc{counterGet, counterReadNow} {
			before := e.counters[tr.leader].reads()
			v, err := e.call(tr.ctx, reader, m, tr.key, 0)
			if err != nil || v != 1 {
				t.Errorf("%s of %s, %s catching up = %d, %v; want 1 from the leader %s", m.Name, tr.key, tr.follower, v, err, tr.leader)
			}
			if n := e.counters[tr.leader].reads() - before; n != 1 {
				t.Errorf("%s of %s ran %d times on the leader %s; want 1", m.Name, tr.key, n, tr.leader)
			}
		}
		tr.release()
		e.check(t)
	})
}

// A linearizable read goes first to the leader the client learned from
// its writes, where raft's ReadIndex costs one heartbeat round and no wait
// for a follower to apply; a default read goes to its entity's owner,
// which answers from its own state. A read the leader fails over goes on
// along its entity's groups from the first, passing over the leader
// there: to the leader's neighbour when the leader owns the entity. The
// leader's attempt costs it none of its failovers: with the default one,
// the read still reaches the entity's second group.
func TestLinearizableReadsGoToTheLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t) // the write taught e.client the leader
		leader := e.Leader(t, counterDesc.Name)
		key := ""
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("k%d", i); e.Owners(counterDesc.Name, k)[0] != leader {
				key = k
			}
		}
		owner := e.Owners(counterDesc.Name, key)[0]
		reads := func() map[string]int {
			m := map[string]int{}
			for name, c := range e.counters {
				m[name] = c.reads()
			}
			return m
		}
		for _, tc := range []struct {
			m    *runtime.MethodDesc
			want string
		}{{counterReadNow, leader}, {counterGet, owner}} {
			before := reads()
			for range 5 {
				if _, err := e.call(ctx, e.client, tc.m, key, 0); err != nil {
					t.Fatalf("%s: %v", tc.m.Name, err)
				}
			}
			after := reads()
			for name := range after {
				want := 0
				if name == tc.want {
					want = 5
				}
				if got := after[name] - before[name]; got != want {
					t.Errorf("%s of %s (owner %s, leader %s): %d ran on %s, want %d", tc.m.Name, key, owner, leader, got, name, want)
				}
			}
		}

		owned := ""
		for i := 0; owned == ""; i++ {
			if k := fmt.Sprintf("k%d", i); e.Owners(counterDesc.Name, k)[0] == leader {
				owned = k
			}
		}
		neighbour := ""
		for _, n := range e.names() {
			if n != leader && n[:1] == leader[:1] { // fftest names a node after its group
				neighbour = n
			}
		}
		e.counters[leader].setGetHook(func(context.Context, string) error { return errCounterBusy })
		// A read that failed at the leader forgets it: a write teaches it
		// again before each read below.
		if _, err := e.add(ctx, owned, 1); err != nil {
			t.Fatal(err)
		}
		before := reads()
		if _, err := e.call(ctx, e.client, counterReadNow, owned, 0); err != nil {
			t.Fatalf("ReadNow of %s, the leader %s busy: %v", owned, leader, err)
		}
		after := reads()
		for name := range after {
			want := 0
			if name == neighbour {
				want = 1
			}
			if got := after[name] - before[name]; got != want {
				t.Errorf("ReadNow of %s (owners %v), the leader busy: %d ran on %s, want it on %s", owned, e.Owners(counterDesc.Name, owned), got, name, neighbour)
			}
		}

		e.counters[neighbour].setGetHook(func(context.Context, string) error { return errCounterBusy })
		second := e.Owners(counterDesc.Name, owned)[1]
		if _, err := e.add(ctx, owned, 1); err != nil {
			t.Fatal(err)
		}
		before = reads()
		if _, err := e.call(ctx, e.client, counterReadNow, owned, 0); err != nil {
			t.Fatalf("ReadNow of %s, the leader %s and %s busy: %v", owned, leader, neighbour, err)
		}
		after = reads()
		for name := range after {
			want := 0
			if name == second {
				want = 1
			}
			if got := after[name] - before[name]; got != want {
				t.Errorf("ReadNow of %s, the leader's group busy: %d ran on %s, want it on %s", owned, got, name, second)
			}
		}
		e.check(t, e.names()...)
	})
}

func slicesDeleteMember(ms []runtime.Member, name string) []runtime.Member {
	var out []runtime.Member
	for _, m := range ms {
		if m.Name != name {
			out = append(out, m)
		}
	}
	return out
}

// A frozen leader is passed over: the client fails over on its heartbeat
// timeout, the node it reaches stands for election at once, and the write
// is acknowledged by the new leader. raft's election timeouts are random:
// over 20 freezes, most writes are acknowledged within twice the heartbeat
// timeout and every one well within the operation timeout. The old
// leader, thawed, is fenced by its term and applies each write once.
func TestReplicationFrozenLeaderIsPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		const freezes = 20
		bound := 2 * e.Settings.HeartbeatTimeout
		slow := 0
		for i := range freezes {
			leader := e.Leader(t, counterDesc.Name)
			e.Net.Pause(leader)
			start := time.Now()
			if _, err := e.add(ctx, "k", 1); err != nil {
				t.Fatalf("freeze %d: write with %s frozen: %v", i, leader, err)
			}
			took := time.Since(start)
			if took > bound {
				slow++
				t.Logf("freeze %d: passed over in %s", i, took)
			}
			if took > 5*bound {
				t.Errorf("freeze %d: the write took %s with the leader frozen", i, took)
			}
			leads := ""
			for _, n := range otherThan(e.names(), leader) {
				if e.Node(n).Server.Replication()[0].Leading {
					leads = n
				}
			}
			if leads == "" {
				t.Errorf("freeze %d: no node but the frozen %s leads", i, leader)
			}
			e.Net.Resume(leader)
			e.WaitConverged(t)
		}
		if slow > freezes/10 {
			t.Errorf("%d of %d writes took longer than %s with the leader frozen", slow, freezes, bound)
		}
		e.check(t)
	})
}

// A write's failover from its leader leaves the leader's failure group.
// The leader here is in the group its service's key orders second, and
// its group-mate is suspected by the client (it was frozen a moment
// before); with the leader frozen, the write's one failover went to the
// leader's own group in the key's order, found every node there
// suspected, and failed unsent, while the other group could elect a
// leader with the group-mate's vote. It now goes to the other group.
// (Were the group-mate elected instead, the node reached would redirect
// the write to it, and the client does not follow a redirect to a node
// it suspects: the test keeps the mate's log behind so that it cannot
// win.)
func TestReplicationFailoverLeavesTheLeadersGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		members := e.Members.Members()
		order := runtime.Route(e.Settings.Groups, members, counterDesc.Name, "ffgen.leader/"+counterDesc.Name)
		second := order[1].Group
		// Move the leadership into the second group: a freeze's failover
		// goes there first, the key's order being what the client had.
		for i := 0; e.Node(e.Leader(t, counterDesc.Name)).Group != second; i++ {
			if i == 20 {
				t.Fatalf("the leadership did not move to group %s in 20 freezes", second)
			}
			leader := e.Leader(t, counterDesc.Name)
			e.Net.Pause(leader)
			if _, err := e.add(ctx, "k", 1); err != nil {
				t.Fatalf("write with %s frozen: %v", leader, err)
			}
			e.Net.Resume(leader)
			e.WaitConverged(t)
		}
		leader := e.Leader(t, counterDesc.Name)
		var mate string
		for _, m := range members {
			if m.Group == second && m.Name != leader {
				mate = m.Name
			}
		}
		// The client suspects the mate: a read of an entity it owns first
		// times out there while it is frozen, and fails over.
		key := ""
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("e%d", i); runtime.Route(e.Settings.Groups, members, counterDesc.Name, k)[0].Name == mate {
				key = k
			}
		}
		e.Net.Pause(mate)
		if _, err := e.call(ctx, e.client, counterGet, key, 0); err != nil {
			t.Fatalf("read of %s with %s frozen: %v", key, mate, err)
		}
		e.Net.Resume(mate)
		// The mate misses the last writes, so that it cannot win the
		// election the freeze below starts on its own timer: the voters'
		// logs are longer. The failover's node is then the one to lead.
		e.Net.Cut(leader, mate)
		for range 2 { // the client learns the leader again, too
			if _, err := e.add(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
		}
		if got := e.Leader(t, counterDesc.Name); got != leader {
			t.Fatalf("leader %s, want %s still", got, leader)
		}

		e.Net.Pause(leader)
		e.Net.Heal(leader, mate)
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatalf("write with the leader %s frozen and %s suspected: %v", leader, mate, err)
		}
		e.Net.Resume(leader)
		e.check(t)
	})
}

// A frozen leader's writer fails over to a node whose log is behind: the
// other voters refuse its candidacy, their logs being longer, and raft
// alone would elect one of them only when its own randomized timer fires,
// up to another election timeout later. The refused node hands the write
// to a voter that refused it, which stands at once: over 30 freezes,
// every write is acknowledged within the heartbeat timeout and a raft
// tick. Left to the voters' timers, a quarter of them took longer, some
// over twice the heartbeat timeout.
func TestReplicationLaggingNodeHandsTheWriteOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		const freezes = 30
		tick := e.Settings.HeartbeatTimeout * 3 / 4 / 10 // the default election timeout's tick
		bound := e.Settings.HeartbeatTimeout + tick
		for i := range freezes {
			leader := e.Leader(t, counterDesc.Name)
			// behind: a voter of the other group, which the client below
			// fails over to, and which misses the last two writes.
			var behind string
			for _, n := range e.Nodes {
				if n.Group != e.Node(leader).Group {
					behind = n.Name
					break
				}
			}
			view := runtime.NewStaticMembership()
			for _, m := range e.Members.Members() {
				if m.Name == leader || m.Name == behind {
					view.Set(append(view.Members(), m))
				}
			}
			c := e.newClient(t, func(cfg *runtime.ClientConfig) {
				cfg.Membership = view
				cfg.Settings.MaxFailovers = 3 // round to behind whichever group comes first
			})
			e.Net.Cut(leader, behind)
			for range 2 {
				if _, err := e.call(ctx, c, counterAdd, "k", 1); err != nil {
					t.Fatalf("freeze %d: write with %s cut from %s: %v", i, behind, leader, err)
				}
			}
			e.Net.Pause(leader)
			e.Net.Heal(leader, behind)
			start := time.Now()
			if _, err := e.call(ctx, c, counterAdd, "k", 1); err != nil {
				t.Fatalf("freeze %d: write with %s frozen and %s behind: %v", i, leader, behind, err)
			}
			if took := time.Since(start); took > bound {
				t.Errorf("freeze %d: the write failed over from the frozen %s through %s, which is behind, in %s; want %s at most", i, leader, behind, took, bound)
			}
			if st := e.Node(behind).Server.Replication()[0]; st.Leading {
				t.Errorf("freeze %d: %s leads with a log that was behind", i, behind)
			}
			e.Net.Resume(leader)
			e.WaitConverged(t)
		}
		e.check(t)
	})
}

// A voter cut off long enough for the failure detector to declare it dead
// catches up as soon as the network heals, while the membership still
// lists it dead: raft keeps sending to it at the address it last had.
// After a long partition, memberlist lists the far side live again only
// once gossip meets it, up to half a minute later with the LAN preset: a
// replica that waited for that would stay behind, unready, as long.
func TestReplicationVoterListedDeadCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		leader := e.Leader(t, counterDesc.Name)
		cut := otherThan(e.names(), leader)[0]
		all := e.Members.Members()
		var alive []runtime.Member
		for _, m := range all {
			if m.Name != cut {
				alive = append(alive, m)
			}
		}
		e.Net.Isolate(cut)
		e.Members.Set(alive)
		for i := range 20 {
			if _, err := e.add(ctx, "k", 1); err != nil {
				t.Fatalf("write %d with %s cut off and listed dead: %v", i, cut, err)
			}
		}
		e.Net.Rejoin(cut)
		e.WaitConverged(t) // cut included, still listed dead
		e.Members.Set(all)
		e.check(t)
	})
}

// A follower that hears its leader only on the connection it dialed
// itself (the leader's dials to it fail, as behind a one-way firewall or
// while they back off after the follower restarted) steps the leader's
// messages as they come, not on its next tick. The peer pool once kept the
// end of each batch of frames to itself: such a follower applied every
// write a tick late, and a leader that needed its answer to commit
// answered a tick late, for as long as the connection lived (a cluster
// that lost a group and got it back ran at half its rate).
func TestFollowerHearsItsLeaderOnItsOwnConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ctx := fourNodesWithAWrite(t)
		leader := e.Leader(t, counterDesc.Name)
		f := otherThan(e.names(), leader)[0]
		e.Net.BlockDials(leader, f)
		e.Net.Reset(leader, f)
		// f finds the leader silent and dials it; the leader answers on
		// that connection.
		if _, err := e.add(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		e.WaitConverged(t)
		applied := func(n string) uint64 { return e.Node(n).Server.Replication()[0].Applied }
		for i := range 5 {
			if _, err := e.add(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // no time passes: no tick
			if got, want := applied(f), applied(leader); got != want {
				t.Errorf("write %d: %s applied %d with no time passing, the leader %d", i, f, got, want)
			}
		}
		e.Net.Heal(leader, f)
		e.check(t)
	})
}

// The leader reports every member's replicated index (raft's progress):
// all of them at its last index once they caught up, and a paused one
// behind by what it missed; the other nodes report no peers.
func TestLeaderReportsEveryMembersProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplicatedEnv(t, fftest.Config{Groups: []string{"a", "b", "c"}}) // a majority without the paused one
		e.WaitReady(t)
		if _, err := e.ledger.Transfer(t.Context(), "x", "y", 0); err != nil {
			t.Fatal(err)
		}
		waitTransfers(t, e, 1)
		time.Sleep(time.Second) // a few ticks
		leader, st := "", runtime.ReplicaStatus{}
		for _, n := range e.Nodes {
			if s := n.Server.Replication()[0]; s.Leading {
				leader, st = n.Name, s
			} else if len(s.Peers) != 0 {
				t.Errorf("%s, a follower, reports peers %+v", n.Name, s.Peers)
			}
		}
		if leader == "" {
			t.Fatal("no leader")
		}
		if len(st.Peers) != len(e.Nodes) {
			t.Fatalf("the leader %s reports %+v; want every one of the %d nodes", leader, st.Peers, len(e.Nodes))
		}
		for _, p := range st.Peers {
			if p.Match != st.LogLast || p.Behind != 0 || !p.Active || p.State != "replicate" {
				t.Errorf("peer %+v; want it active at the leader's last index %d", p, st.LogLast)
			}
		}
		var follower string
		for _, n := range e.Nodes {
			if n.Name != leader {
				follower = n.Name
				break
			}
		}
		e.Net.Pause(follower)
		if _, err := e.ledger.Transfer(t.Context(), "x", "y", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		st = e.Node(leader).Server.Replication()[0]
		for _, p := range st.Peers {
			if p.Node == follower && (p.Behind == 0 || p.Match >= st.LogLast) {
				t.Errorf("paused %s reported %+v; want it behind the leader's %d", follower, p, st.LogLast)
			}
		}
		e.Net.Resume(follower)
		e.WaitConverged(t)
	})
}
