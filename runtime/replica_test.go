package runtime_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// sequencer returns the node that leads the test service's log.
func (e *env) sequencer(t *testing.T) string {
	t.Helper()
	for _, n := range e.Nodes {
		for _, st := range n.Server.Replication() {
			if st.Leading {
				return n.Name
			}
		}
	}
	t.Fatal("no node leads the log")
	return ""
}

// wantEqual checks that every listed replica holds the same balances and
// ran each entity's operations in the same order.
func (e *env) wantEqual(t *testing.T, names ...string) map[string]int64 {
	t.Helper()
	e.WaitConverged(t)
	synctest.Wait()
	ref := e.ledgers[names[0]]
	want := ref.balances()
	for _, name := range names[1:] {
		l := e.ledgers[name]
		if diff := cmp.Diff(want, l.balances()); diff != "" {
			t.Errorf("replica %s differs from %s (-%s +%s):\n%s", name, names[0], names[0], name, diff)
		}
		for acct := range want {
			if diff := cmp.Diff(entityLog(ref, acct), entityLog(l, acct)); diff != "" {
				t.Errorf("replica %s ran the operations on %s in another order:\n%s", name, acct, diff)
			}
		}
	}
	return want
}

// Writes from several clients to the same entities, some of which fail for
// lack of funds depending on what ran before, leave every replica equal:
// one sequencer orders them all.
func TestManyWritersOneOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{PerGroup: 2})
		e.ledger.add = scatterAdd()
		if _, err := e.ledger.Add(t.Context(), "x", 10); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 3 {
			lc := newLedgerClient(e.Client(t))
			lc.add = scatterAdd()
			wg.Go(func() {
				for i := range 20 {
					from, to := "x", "y"
					if (i+w)%2 == 1 {
						from, to = to, from
					}
					_, err := lc.Transfer(t.Context(), from, to, int64(3+w))
					var lim *LimitError
					if err != nil && !errors.As(err, &lim) {
						t.Errorf("writer %d transfer %d: %v", w, i, err)
					}
				}
			})
		}
		wg.Wait()
		got := e.wantEqual(t, "a1", "a2", "b1", "b2")
		if got["x"]+got["y"] != 10 {
			t.Errorf("money not conserved: %v", got)
		}
	})
}

// A frozen sequencer is passed over within the heartbeat timeout: the
// client fails over, the next node takes over a newer epoch, the write runs
// once everywhere; the old sequencer, thawed, follows the new epoch.
func TestFrozenSequencerIsPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{PerGroup: 2})
		e.ledger.add = scatterAdd()
		if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
			t.Fatal(err)
		}
		old := e.sequencer(t)
		e.Net.Pause(old)
		start := time.Now()
		if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
			t.Fatalf("write with the sequencer frozen: %v", err)
		}
		s := e.Settings
		if d := time.Since(start); d > s.HeartbeatTimeout+margin {
			t.Errorf("write took %v with the sequencer frozen; want at most the heartbeat timeout %v", d, s.HeartbeatTimeout)
		}
		if now := e.sequencer(t); now == old {
			t.Fatalf("%s still leads", old)
		}
		for range 5 {
			if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
				t.Fatal(err)
			}
		}
		e.Net.Resume(old)
		got := e.wantEqual(t, "a1", "a2", "b1", "b2")
		if got["x"] != 7 {
			t.Errorf("x = %d on every replica, want 7", got["x"])
		}
		for name, l := range e.ledgers {
			l.mu.Lock()
			for op, n := range l.runs {
				if n != 1 {
					t.Errorf("%s ran operation %s %d times", name, op, n)
				}
			}
			l.mu.Unlock()
		}
	})
}

// A node restarted empty answers nothing until it has copied the others,
// by replaying the log or, once the log no longer reaches back, from a
// snapshot.
func TestRestartedNodeCatchesUpBeforeAnswering(t *testing.T) {
	for _, tc := range []struct {
		name     string
		log      int
		snapshot bool
	}{{"replay", 0, false}, {"snapshot", 4, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Two nodes may be copying at once here (the restarted
				// one and one the tiny log left behind), so the write
				// after the restart may need more than one failover.
				s := runtime.DefaultSettings()
				s.MaxFailovers = 3
				e := newEnv(t, fftest.Config{PerGroup: 2, Settings: s, Replication: runtime.ReplicationConfig{LogEntries: tc.log}})
				e.ledger.add = scatterAdd()
				for i := range 20 {
					if _, err := e.ledger.Add(t.Context(), fmt.Sprintf("acct-%d", i%5), 1); err != nil {
						t.Fatal(err)
					}
				}
				victim := "b2"
				n := e.Restart(t, victim)
				// Until it caught up, it refuses reads of the service.
				if err := n.Server.Ready(); err == nil {
					t.Fatalf("%s is ready right after a restart", victim)
				}
				e.WaitReady(t)
				// The victim may have been the sequencer: the next write
				// makes a node take over, which commits what the old one
				// had not told the others yet.
				if _, err := e.ledger.Add(t.Context(), "acct-0", 1); err != nil {
					for _, n := range e.Nodes {
						t.Logf("%s: %+v", n.Name, n.Server.Replication())
					}
					t.Fatal(err)
				}
				got := e.wantEqual(t, "a1", "a2", "b1", victim)
				if got["acct-0"] != 5 {
					t.Errorf("acct-0 = %d, want 5", got["acct-0"])
				}
				st := n.Server.Replication()[0]
				// It may catch up more than once: the copy it took can
				// be older than what the sequencer commits meanwhile.
				if st.CatchUps < 1 || (st.Snapshots > 0) != tc.snapshot {
					t.Errorf("catch-ups %d, snapshots %d; want at least 1 catch-up, snapshot %v", st.CatchUps, st.Snapshots, tc.snapshot)
				}
			})
		})
	}
}

// A follower frozen while writes go on leaves the in-sync set (writes wait
// at most AckTimeout for it), knows it is behind when it thaws, and catches
// up; reads it would answer meanwhile fail over.
func TestFollowerThatMissedWritesCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{PerGroup: 2})
		e.ledger.add = scatterAdd()
		if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
			t.Fatal(err)
		}
		seq := e.sequencer(t)
		var frozen string
		for _, n := range e.Nodes {
			if n.Name != seq {
				frozen = n.Name
				break
			}
		}
		e.Net.Pause(frozen)
		start := time.Now()
		for range 10 {
			if _, err := e.ledger.Add(t.Context(), "x", 1); err != nil {
				t.Fatal(err)
			}
		}
		const ack = 100 * time.Millisecond // ReplicationConfig.AckTimeout's default
		if d := time.Since(start); d > 2*ack+margin {
			t.Errorf("10 writes took %v with a follower frozen; want one wait of about AckTimeout (%v)", d, ack)
		}
		time.Sleep(2 * time.Second)
		e.Net.Resume(frozen)
		got := e.wantEqual(t, "a1", "a2", "b1", "b2")
		if got["x"] != 11 {
			t.Errorf("x = %d, want 11", got["x"])
		}
	})
}
