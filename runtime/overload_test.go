package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// A burst beyond a node's MaxPending is refused at once with the typed
// error: nothing of it runs, nothing fails over, nobody is suspected, and
// the attempts within the limit run to the end.
func TestOverloadRefusesBurstAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxPending, cfg.MaxPendingPerEntity = limit, -1
			cfg.OverloadRetryAfter = 30 * time.Millisecond
		}})
		m := &failoverCounter{}
		client := e.Client(t, func(c *runtime.ClientConfig) { c.Metrics = m })
		ledger := testledger.NewClient(client)
		synctest.Wait()
		own := e.owners(t, "acct0")[0]
		// Entities that the same node owns, one per call, so that the
		// per-entity queues hold nobody up.
		accts := e.ownedBy(t, own, "acct", 3*limit)
		release := e.holdHandlers(own)
		errs := make([]error, len(accts))
		var wg sync.WaitGroup
		for i, a := range accts[:limit] {
			wg.Go(func() { _, errs[i] = ledger.Add(t.Context(), a, 1) })
		}
		synctest.Wait() // the first limit run, blocked
		start := time.Now()
		for i, a := range accts[limit:] {
			_, err := ledger.Add(t.Context(), a, 1)
			if !errors.Is(err, runtime.ErrOverloaded) {
				t.Fatalf("call %d beyond the limit: err = %v, want ErrOverloaded", i, err)
			}
			if runtime.MaybeExecuted(err) {
				t.Errorf("call %d beyond the limit: MaybeExecuted = true, want false: %v", i, err)
			}
			if d, ok := runtime.RetryAfter(err); !ok || d != 30*time.Millisecond {
				t.Errorf("call %d: RetryAfter = %v, %v; want 30ms", i, d, ok)
			}
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("refusals took %v, want at once", took)
		}
		close(release)
		wg.Wait()
		for i, err := range errs[:limit] {
			if err != nil {
				t.Errorf("call %d within the limit: %v", i, err)
			}
		}
		checkRefusedUnrun(t, e, client, m, own, limit)
	})
}

// One hot entity cannot take the node: past MaxPendingPerEntity its calls
// are refused while calls of other entities are taken.
func TestOverloadPerEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxPendingPerEntity = 2
		}})
		own := e.owners(t, "hot")[0]
		release := make(chan struct{})
		e.ledgers[own].SetHook(func(ctx context.Context, acct string, _ int64) error {
			if acct == "hot" {
				<-release
			}
			return nil
		})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { e.ledger.Add(t.Context(), "hot", 1) })
		}
		synctest.Wait()
		if _, err := e.ledger.Add(t.Context(), "hot", 1); !errors.Is(err, runtime.ErrOverloaded) || runtime.MaybeExecuted(err) {
			t.Errorf("third call of the hot entity: err = %v, want ErrOverloaded, not executed", err)
		}
		other := e.ownedBy(t, own, "cold", 1)[0]
		if _, err := e.ledger.Add(t.Context(), other, 1); err != nil {
			t.Errorf("call of another entity on the same node: %v", err)
		}
		close(release)
		wg.Wait()
		if e.client.Suspected(own) {
			t.Errorf("%s suspected", own)
		}
	})
}

// A node at its connection limit says so: a client it refuses gets
// ErrOverloaded, not executed, and neither suspects the node nor fails
// over. Over real TCP, with real clocks: no timing is asserted.
func TestConnectionLimitIsNotDeath(t *testing.T) {
	e := newTCPEnv(t, runtime.DefaultSettings(), func(c *transport.TCPConfig) { c.MaxConns = 1 })
	own := e.owners(t, "acct")
	// The env's client takes the owner's only connection slot.
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
		t.Fatal(err)
	}
	ctp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "late", Group: "clients", Logger: testkit.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	m := &failoverCounter{}
	late, err := runtime.NewClient(runtime.ClientConfig{Transport: ctp, Membership: e.members, Settings: e.s, Metrics: m, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	_, err = testledger.NewClient(late).Add(t.Context(), "acct", 1)
	if !errors.Is(err, runtime.ErrOverloaded) || runtime.MaybeExecuted(err) {
		t.Fatalf("call past the connection limit: err = %v; want ErrOverloaded, not executed", err)
	}
	if _, ok := runtime.RetryAfter(err); !ok {
		t.Errorf("no retry-after hint in %v", err)
	}
	if late.Suspected(own[0]) {
		t.Errorf("%s suspected for its connection limit", own[0])
	}
	if n := m.n.Load(); n != 0 {
		t.Errorf("%d failovers, want 0", n)
	}
	if n := e.ledgers[own[0]].Executions(); n != 1 {
		t.Errorf("%s ran %d handlers, want 1 (the first client's)", own[0], n)
	}
	if n := e.ledgers[own[1]].Executions(); n != 0 {
		t.Errorf("%s ran %d handlers: the refused call failed over", own[1], n)
	}
}

// limitRun drives one node of e, which takes capacity operations at once
// of 10 ms each, with clients (callers each, one entity per caller) for
// 5 s of the bubble's time, and returns the operations each client had
// answered. A call the node refuses sleeps its retry-after hint and goes
// on; any other error fails the test.
func limitRun(t *testing.T, e *env, capacity int, clients []*runtime.Client, callers int) (own string, ok []int64, refused, heldBack int64) {
	t.Helper()
	own = e.owners(t, "acct0")[0]
	accts := e.ownedBy(t, own, "acct", len(clients)*callers)
	e.ledgers[own].SetHook(func(ctx context.Context, _ string, _ int64) error {
		time.Sleep(10 * time.Millisecond)
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	counts := make([]atomic.Int64, len(clients))
	var refusedByNode, held atomic.Int64
	var wg sync.WaitGroup
	for i, a := range accts {
		ledger := testledger.NewClient(clients[i%len(clients)])
		wg.Go(func() {
			for ctx.Err() == nil {
				_, err := ledger.Add(context.Background(), a, 1)
				var oe *runtime.OverloadError
				switch {
				case err == nil:
					counts[i%len(clients)].Add(1)
				case errors.As(err, &oe):
					if strings.Contains(oe.Detail, "ClientConfig.Limit") {
						held.Add(1)
					} else {
						refusedByNode.Add(1)
					}
					time.Sleep(oe.RetryAfter)
				default:
					t.Errorf("Add: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range counts {
		ok = append(ok, counts[i].Load())
	}
	for _, c := range clients {
		for _, l := range c.Limits() {
			if l.Node == own && (l.InFlight != 0 || l.Waiting != 0) {
				t.Errorf("%d attempts still counted in flight, %d waiting", l.InFlight, l.Waiting)
			}
		}
		if c.Suspected(own) {
			t.Errorf("%s suspected", own)
		}
	}
	return own, ok, refusedByNode.Load(), held.Load()
}

// limitOf is c's limit to node.
func limitOf(c *runtime.Client, node string) int {
	for _, l := range c.Limits() {
		if l.Node == node {
			return l.Limit
		}
	}
	return -1
}

// A client with more callers than a node takes learns the node's
// capacity, and its limit backs off without costing it throughput: the
// callers beyond the limit wait for a slot instead of failing, and the
// client keeps at least 90% of what the node can do.
func TestClientLimitKeepsCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const capacity = 24 // operations the node takes at once
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxPending = capacity
		}})
		client := e.Client(t, func(c *runtime.ClientConfig) {
			c.Limit = runtime.LimitConfig{Enabled: true, Initial: 100, Min: 4}
		})
		synctest.Wait()
		own, ok, refused, held := limitRun(t, e, capacity, []*runtime.Client{client}, 4*capacity)
		limit := limitOf(client, own)
		most := int64(capacity * 5 * 100) // 5 s of capacity operations of 10 ms
		t.Logf("limit %d; %d ok of %d possible, %d refused by the node, %d held back by the client", limit, ok[0], most, refused, held)
		if limit < capacity/2 || limit > 2*capacity {
			t.Errorf("limit to %s = %d, want within [%d, %d] of its capacity %d", own, limit, capacity/2, 2*capacity, capacity)
		}
		if 10*ok[0] < 9*most {
			t.Errorf("%d operations answered, want at least 90%% of the node's %d", ok[0], most)
		}
		if held != 0 {
			t.Errorf("%d calls held back by the client: callers beyond the limit must wait for a slot, not fail", held)
		}
		// Once learned, the node refuses little: the probes above the
		// limit that AIMD makes once a round. A refused slot handed on
		// to the attempts waiting was refused again through all of them:
		// 5 to 25% of what was answered, instead of 2.
		if 20*refused > ok[0] {
			t.Errorf("the node refused %d for %d answered: the client did not learn", refused, ok[0])
		}
	})
}

// A client with a Backlog sheds instead of queueing: past its limit and
// the attempts that may wait for a slot, a call is refused at once,
// unsent, with the typed error and the hint, nothing fails over and
// nobody is suspected; those that wait get their slots as the node
// answers.
func TestClientLimitBacklogSheds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, backlog = 4, 2 // Backlog 0.5 of the limit
		e := newEnv(t, fftest.Config{})
		m := &failoverCounter{}
		client := e.Client(t, func(c *runtime.ClientConfig) {
			c.Metrics = m
			c.Limit = runtime.LimitConfig{Enabled: true, Initial: limit, Min: limit, Max: limit, Backlog: 0.5}
		})
		ledger := testledger.NewClient(client)
		synctest.Wait()
		own := e.owners(t, "acct0")[0]
		accts := e.ownedBy(t, own, "acct", 2*limit)
		release := e.holdHandlers(own)
		errs := make([]error, limit+backlog)
		var wg sync.WaitGroup
		for i, a := range accts[:limit+backlog] {
			wg.Go(func() { _, errs[i] = ledger.Add(t.Context(), a, 1) })
			synctest.Wait() // in order: the first limit are sent, the rest wait
		}
		start := time.Now()
		for i, a := range accts[limit+backlog:] {
			_, err := ledger.Add(t.Context(), a, 1)
			var oe *runtime.OverloadError
			if !errors.As(err, &oe) || !strings.Contains(oe.Detail, "ClientConfig.Limit") {
				t.Fatalf("call %d past the backlog: err = %v, want this client's *OverloadError", i, err)
			}
			if runtime.MaybeExecuted(err) {
				t.Errorf("call %d past the backlog: MaybeExecuted = true, want false: %v", i, err)
			}
			if d, ok := runtime.RetryAfter(err); !ok || d <= 0 {
				t.Errorf("call %d past the backlog: RetryAfter = %v, %v; want a hint", i, d, ok)
			}
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("refusals took %v, want at once", took)
		}
		if n := e.ledgers[own].Executions(); n != limit {
			t.Errorf("%s runs %d handlers, want the limit's %d", own, n, limit)
		}
		close(release)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("call %d within the limit and its backlog: %v", i, err)
			}
		}
		checkRefusedUnrun(t, e, client, m, own, limit+backlog)
	})
}

// Clients sharing a node converge on its capacity between them: together
// they keep at least 90% of it, none is starved, and the node refuses
// no more than their probes above the limit, each once a round.
func TestClientLimitsConverge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const capacity = 24
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxPending = capacity
		}})
		var clients []*runtime.Client
		for range 3 {
			clients = append(clients, e.Client(t, func(c *runtime.ClientConfig) {
				c.Limit = runtime.LimitConfig{Enabled: true, Initial: 100, Min: 2}
			}))
		}
		synctest.Wait()
		own, ok, refused, held := limitRun(t, e, capacity, clients, capacity)
		most := int64(capacity * 5 * 100)
		var sum int64
		for i, n := range ok {
			sum += n
			t.Logf("client %d: limit %d, %d ok", i, limitOf(clients[i], own), n)
		}
		t.Logf("%d ok of %d possible, %d refused by the node, %d held back", sum, most, refused, held)
		if 10*sum < 9*most {
			t.Errorf("%d operations answered together, want at least 90%% of the node's %d", sum, most)
		}
		for i, n := range ok {
			if 6*n < most/int64(len(clients)) {
				t.Errorf("client %d answered %d, under a sixth of a fair share of %d", i, n, most)
			}
		}
		if 6*refused > sum {
			t.Errorf("the node refused %d for %d answered: the clients did not learn", refused, sum)
		}
	})
}

// Busy is not dead. A node whose every handler is busy keeps
// heartbeating them within the interval, and an attempt that waits
// unread behind the connection's backlog for longer than a heartbeat
// timeout (here a delay on the way in, as a saturated node's reader is
// late) is not failed over while the node's frames keep coming: it runs
// there, once, and nobody suspects the node.
func TestBusyNodeIsNotDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		m := &failoverCounter{}
		client := e.Client(t, func(c *runtime.ClientConfig) { c.Metrics = m })
		ledger := testledger.NewClient(client)
		synctest.Wait()
		own := e.owners(t, "late")[0]
		busy := e.ownedBy(t, own, "busy", 8)
		release := make(chan struct{})
		e.ledgers[own].SetHook(func(ctx context.Context, acct string, _ int64) error {
			if strings.HasPrefix(acct, "busy") {
				<-release // every handler busy for a second
			}
			return nil
		})
		errs := make([]error, len(busy))
		var wg sync.WaitGroup
		for i, a := range busy {
			wg.Go(func() { _, errs[i] = ledger.Add(t.Context(), a, 1) })
		}
		synctest.Wait()
		// The node reads the next attempt late: 2.5 heartbeat timeouts
		// after it was sent.
		late := 5 * e.Settings.HeartbeatTimeout / 2
		e.Net.Delay("client2", own, late)
		start := time.Now()
		if _, err := ledger.Add(t.Context(), "late", 1); err != nil {
			t.Fatalf("call read late by a busy node: %v", err)
		}
		if took := time.Since(start); took < late {
			t.Errorf("answered in %v, before the node read it (%v)", took, late)
		}
		time.Sleep(time.Second - time.Since(start))
		close(release)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("busy call %d: %v", i, err)
			}
		}
		if n := m.n.Load(); n != 0 {
			t.Errorf("%d failovers of a node that was only busy", n)
		}
		if n := e.ledgers[own].Executions(); n != len(busy)+1 {
			t.Errorf("%s ran %d handlers, want %d", own, n, len(busy)+1)
		}
		for _, n := range e.Nodes {
			if n.Name != own && e.ledgers[n.Name].Executions() != 0 {
				t.Errorf("%s ran a handler: a call failed over from the busy node", n.Name)
			}
		}
		if client.Suspected(own) {
			t.Errorf("%s suspected", own)
		}
	})
}

// The bound on by default counts the operations that wait to start, not
// those that run: a node holds any number of long handlers, and past
// MaxQueued operations queued behind them a burst is refused at once with
// the typed error, unrun, with nothing failed over and nobody suspected;
// the queued ones run to the end once the way is free.
func TestOverloadCountsQueuedWorkOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit = 4
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxQueued = limit
		}})
		m := &failoverCounter{}
		client := e.Client(t, func(c *runtime.ClientConfig) { c.Metrics = m })
		ledger := testledger.NewClient(client)
		synctest.Wait()
		own := e.owners(t, "hot")[0]
		// More long handlers than the bound, each on an entity of its own.
		long := e.ownedBy(t, own, "long", 3*limit)
		release := e.holdHandlers(own)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		call := func(acct string) {
			wg.Go(func() {
				_, err := ledger.Add(t.Context(), acct, 1)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		for _, a := range long {
			call(a)
		}
		synctest.Wait()
		if n := e.ledgers[own].Executions(); n != len(long) {
			t.Fatalf("%d long handlers running, want all %d: running handlers count against MaxQueued", n, len(long))
		}
		// One more on a busy entity runs behind it, and so do limit-1
		// more: the queue is full.
		for range limit {
			call(long[0])
		}
		synctest.Wait()
		if ld := e.Node(own).Server.Load(); ld.Queued != limit || ld.MaxQueued != limit {
			t.Errorf("%s's load %+v, want %d queued of %d", own, ld, limit, limit)
		}
		start := time.Now()
		for i := range 3 {
			_, err := ledger.Add(t.Context(), long[0], 1)
			if !errors.Is(err, runtime.ErrOverloaded) || runtime.MaybeExecuted(err) {
				t.Fatalf("call %d beyond %d queued: err = %v, want ErrOverloaded, not executed", i, limit, err)
			}
			var oe *runtime.OverloadError
			if !errors.As(err, &oe) || !strings.Contains(oe.Detail, "MaxQueued") {
				t.Errorf("call %d: %v, want an OverloadError naming MaxQueued", i, err)
			}
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("refusals took %v, want at once", took)
		}
		close(release)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("admitted call %d: %v", i, err)
			}
		}
		checkRefusedUnrun(t, e, client, m, own, len(long)+limit)
		if ld := e.Node(own).Server.Load(); ld.Queued != 0 || ld.Pending != 0 {
			t.Errorf("%s's load %+v once every call ended, want nothing queued or pending", own, ld)
		}
	})
}

// The count of operations waiting to start follows replicated writes
// through the log on every node, leader and followers, and comes back to
// nothing when they are done: a count that drifted up would refuse work
// on an idle node.
func TestQueuedCountFollowsReplicatedWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplicatedEnv(t, fftest.Config{})
		synctest.Wait()
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				from, to := fmt.Sprintf("r%d", i), fmt.Sprintf("r%d", i+1)
				if _, err := e.ledger.Add(t.Context(), from, 5); err != nil {
					t.Errorf("Add: %v", err)
				}
				if _, err := e.ledger.Transfer(t.Context(), from, to, 0); err != nil {
					t.Errorf("Transfer: %v", err)
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second) // followers apply
		synctest.Wait()
		for _, n := range e.Nodes {
			if ld := n.Server.Load(); ld.Queued != 0 {
				t.Errorf("%s: %d operations waiting to start once every call ended, want 0", n.Name, ld.Queued)
			}
		}
	})
}

// A retry of a replicated write that the log has recorded is answered
// from the record even when the node is past its admission bound: a
// refusal would tell the caller that a write that ran never did.
func TestRecordedWriteIsAnsweredPastTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplicatedEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxQueued = 1
		}})
		synctest.Wait()
		id := [16]byte{31, 1}
		ctx := runtime.WithOperationID(t.Context(), id)
		if _, err := e.ledger.Transfer(ctx, "x", "y", 0); err != nil {
			t.Fatalf("Transfer: %v", err)
		}
		// One operation waits to start on every node: the bound.
		release := make(chan struct{})
		var wg sync.WaitGroup
		for _, n := range e.Nodes {
			busy := ""
			for i := 0; busy == ""; i++ {
				if a := fmt.Sprintf("busy%d", i); e.owners(t, a)[0] == n.Name {
					busy = a
				}
			}
			e.ledgers[n.Name].SetHook(func(ctx context.Context, acct string, _ int64) error {
				if acct == busy {
					<-release
				}
				return nil
			})
			for range 2 {
				wg.Go(func() { e.ledger.Add(t.Context(), busy, 1) })
				synctest.Wait()
			}
			if ld := n.Server.Load(); ld.Queued != 1 {
				t.Fatalf("%s's load %+v, want one operation waiting", n.Name, ld)
			}
		}
		if _, err := e.ledger.Transfer(t.Context(), "x", "y", 0); !errors.Is(err, runtime.ErrOverloaded) {
			t.Errorf("a new write past the bound: %v, want ErrOverloaded", err)
		}
		if _, err := e.ledger.Transfer(ctx, "x", "y", 0); err != nil {
			t.Errorf("the recorded write asked again past the bound: %v, want its recorded answer", err)
		}
		close(release)
		wg.Wait()
	})
}

// checkRefusedUnrun checks what a burst refused for overload left behind:
// own ran want handlers (none of those it refused), no other node ran one
// (nothing failed over), no node is suspected, and the client counted no
// failover.
func checkRefusedUnrun(t *testing.T, e *env, client *runtime.Client, m *failoverCounter, own string, want int) {
	t.Helper()
	if n := e.ledgers[own].Executions(); n != want {
		t.Errorf("%s ran %d handlers, want %d: a refused call ran", own, n, want)
	}
	for _, n := range e.Nodes {
		if n.Name != own && e.ledgers[n.Name].Executions() != 0 {
			t.Errorf("%s ran a handler: a refused call failed over", n.Name)
		}
		if client.Suspected(n.Name) {
			t.Errorf("%s suspected after refusing for overload", n.Name)
		}
	}
	if n := m.n.Load(); n != 0 {
		t.Errorf("%d failovers, want 0", n)
	}
}
