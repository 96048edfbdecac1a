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

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Timing bounds below are exact in a synctest bubble; margin covers the
// heartbeat ticks a scenario needs, never wall-clock noise.
const margin = 10 * time.Millisecond

type env struct {
	*fftest.Cluster
	ledgers map[string]*testledger.Mem
	client  *runtime.Client
	ledger  *testledger.Client
}

// newEnv serves the ledger without its replicated method (Transfer): the
// failover engine's tests freeze and cut nodes, and a replicated service
// stops serving on a node that loses the majority of its raft group.
func newEnv(t *testing.T, cfg fftest.Config) *env {
	t.Helper()
	return newEnvOf(t, cfg, testledger.PlainDesc)
}

// newReplicatedEnv serves the whole ledger: Transfer is a replicated
// write.
func newReplicatedEnv(t *testing.T, cfg fftest.Config) *env {
	t.Helper()
	return newEnvOf(t, cfg, testledger.Desc)
}

func newEnvOf(t *testing.T, cfg fftest.Config, desc *runtime.ServiceDesc) *env {
	t.Helper()
	e := &env{Cluster: fftest.New(t, cfg), ledgers: map[string]*testledger.Mem{}}
	e.Serve(t, desc, func(n *fftest.Node) any {
		l := testledger.NewMem(n.Name)
		e.ledgers[n.Name] = l
		return l
	})
	e.client = e.Client(t)
	e.ledger = testledger.NewClient(e.client)
	synctest.Wait() // the client has seen the membership
	return e
}

// owners returns the entity's owner in each group, in failover order.
func (e *env) owners(t *testing.T, entity string) []string {
	t.Helper()
	own := e.Owners("test.Ledger", entity)
	if len(own) != len(e.Settings.Groups) {
		t.Fatalf("owners of %q = %v, want one in each of %d groups", entity, own, len(e.Settings.Groups))
	}
	return own
}

// cutOffOwner cuts the client off from entity's owner in its first group,
// breaking their connection, and returns the owner once an operation on
// entity has failed over from it: the client suspects it, as a node it
// could not dial, and redials it in the background.
func (e *env) cutOffOwner(t *testing.T, entity string) string {
	t.Helper()
	first := e.owners(t, entity)[0]
	if _, err := e.ledger.Add(t.Context(), entity, 1); err != nil {
		t.Fatal(err)
	}
	e.Net.CutBoth("client1", first)
	e.Net.Reset("client1", first)
	synctest.Wait()
	if _, err := e.ledger.Add(t.Context(), entity, 1); err != nil {
		t.Fatal(err) // failed over to the next group's owner
	}
	if !e.client.Suspected(first) {
		t.Fatalf("%s not suspected after its connection broke and it could not be dialed", first)
	}
	return first
}

// ownedBy returns the first n of the entities prefix0, prefix1, ... whose
// first owner is node.
func (e *env) ownedBy(t *testing.T, node, prefix string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		if a := fmt.Sprintf("%s%d", prefix, i); e.owners(t, a)[0] == node {
			out = append(out, a)
		}
	}
	return out
}

// holdHandlers makes node's ledger handlers wait until the channel it
// returns is closed.
func (e *env) holdHandlers(node string) chan struct{} {
	release := make(chan struct{})
	e.ledgers[node].SetHook(func(context.Context, string, int64) error {
		<-release
		return nil
	})
	return release
}

func TestHealthyCallGoesToPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		got, err := e.ledger.Add(t.Context(), "acct", 5)
		if err != nil || got != 5 {
			t.Fatalf("Add = %d, %v; want 5, nil", got, err)
		}
		if n := e.ledgers[own[0]].Executions(); n != 1 {
			t.Errorf("primary %s ran %d times, want 1", own[0], n)
		}
		if n := e.ledgers[own[1]].Executions(); n != 0 {
			t.Errorf("secondary %s ran %d times, want 0", own[1], n)
		}
	})
}

func TestPausedPrimaryFailsOverWithinHeartbeatTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		// The primary starts the operation, then freezes mid-way.
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			e.Net.Pause(own[0])
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		got, err := e.ledger.Add(t.Context(), "acct", 7)
		took := time.Since(start)
		if err != nil || got != 7 {
			t.Fatalf("Add = %d, %v; want 7 from %s", got, err, own[1])
		}
		if max := e.Settings.HeartbeatTimeout + margin; took > max {
			t.Errorf("failover took %v, want <= %v", took, max)
		}
		if !e.client.Suspected(own[0]) {
			t.Errorf("%s not suspected after a heartbeat timeout", own[0])
		}
		e.Net.Resume(own[0])
	})
}

func TestConnectionResetFailsOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			e.Net.ResetNode(own[0])
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("failover after a reset took %v, want no waiting at all", took)
		}
	})
}

func TestFailErrorIsReturnedWithoutFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		for _, l := range e.ledgers {
			l.SetHook(func(context.Context, string, int64) error { return testledger.ErrRejected })
		}
		_, err := e.ledger.Add(t.Context(), "acct", 1)
		if err != testledger.ErrRejected {
			t.Fatalf("err = %v, want ErrRejected itself", err)
		}
		if n := e.ledgers[own[1]].Executions(); n != 0 {
			t.Errorf("secondary ran %d times after a Fail error", n)
		}
	})
}

func TestDeclaredErrorTypeCrossesTheWire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplicatedEnv(t, fftest.Config{})
		_, err := e.ledger.Transfer(t.Context(), "x", "y", 10)
		var le *testledger.LimitError
		if !errors.As(err, &le) || le.Limit != 0 {
			t.Fatalf("err = %v, want *LimitError{0}", err)
		}
	})
}

func TestFailoverErrorTriesNextGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		got, err := e.ledger.Add(t.Context(), "acct", 3)
		if err != nil || got != 3 {
			t.Fatalf("Add = %d, %v", got, err)
		}
		if n := e.ledgers[own[1]].Executions(); n != 1 {
			t.Errorf("secondary ran %d times, want 1", n)
		}
		if e.client.Suspected(own[0]) {
			t.Errorf("a Failover error must not make the node suspected")
		}
	})
}

func TestEveryGroupDownTimesOutWithHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		for _, n := range e.Nodes {
			e.Net.Pause(n.Name)
		}
		start := time.Now()
		_, err := e.ledger.Add(t.Context(), "acct", 1)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want one matching context.DeadlineExceeded", err)
		}
		var fe *runtime.Error
		if !errors.As(err, &fe) {
			t.Fatalf("err = %T, want *runtime.Error", err)
		}
		if len(fe.History) != 2 {
			t.Fatalf("history has %d attempts, want 2: %v", len(fe.History), fe)
		}
		for _, h := range fe.History {
			if h.Reason != runtime.ReasonDialFailed && h.Reason != runtime.ReasonHeartbeatTimeout {
				t.Errorf("attempt %d ended with %s", h.Number, h.Reason)
			}
		}
		if took > e.Settings.OperationTimeout+margin {
			t.Errorf("caller waited %v, past the operation deadline", took)
		}
		for _, n := range e.Nodes {
			e.Net.Resume(n.Name)
		}
	})
}

func TestLongOperationOnHealthyNodeDoesNotFailOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		work := 10 * e.Settings.HeartbeatTimeout
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			time.Sleep(work)
			return nil
		})
		start := time.Now()
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != work {
			t.Errorf("took %v, want exactly the handler's %v", took, work)
		}
		if n := e.ledgers[own[1]].Executions(); n != 0 {
			t.Errorf("secondary ran %d times: a heartbeating node was failed over", n)
		}
	})
}

func TestMaxFailoversRespected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.MaxFailovers = 3
		e := newEnv(t, fftest.Config{Settings: s})
		var calls atomic.Int32
		for _, l := range e.ledgers {
			l.SetHook(func(context.Context, string, int64) error { calls.Add(1); return testledger.ErrBusy })
		}
		_, err := e.ledger.Add(t.Context(), "acct", 1)
		if !errors.Is(err, testledger.ErrBusy) {
			t.Fatalf("err = %v, want the last failure, ErrBusy", err)
		}
		// Four attempts: groups retried in order, but a node answers a
		// repeated operation from memory only if it completed; Failover
		// answers are not remembered, so each attempt runs.
		if got := calls.Load(); got != 4 {
			t.Errorf("%d attempts, want 1 + 3 failovers", got)
		}
		var fe *runtime.Error
		if errors.As(err, &fe); fe == nil || len(fe.History) != 4 || fe.Delivery != runtime.Acknowledged {
			t.Errorf("error = %v, want 4 attempts acknowledged", err)
		}
	})
}

func TestScatterKeepsReplicasEqual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplicatedEnv(t, fftest.Config{PerGroup: 2})
		// Fund the accounts everywhere with scatter writes.
		e.ledger.AddMethod = scatterAdd()
		for _, acct := range []string{"x", "y"} {
			if _, err := e.ledger.Add(t.Context(), acct, 100); err != nil {
				t.Fatal(err)
			}
		}
		paused := e.Nodes[1].Name
		e.Net.Pause(paused)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				from, to := "x", "y"
				if i%2 == 1 {
					from, to = to, from
				}
				if _, err := e.ledger.Transfer(t.Context(), from, to, int64(1+i%3)); err != nil {
					t.Errorf("transfer %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		e.Net.Resume(paused)
		e.WaitConverged(t) // the paused node catches up
		want := e.ledgers[e.Nodes[0].Name].Balances()
		if want["x"]+want["y"] != 200 {
			t.Fatalf("money not conserved: %v", want)
		}
		for name, l := range e.ledgers {
			if diff := cmp.Diff(want, l.Balances()); diff != "" {
				t.Errorf("replica %s differs (-%s +%s):\n%s", name, e.Nodes[0].Name, name, diff)
			}
			// Each entity sees the same operations in the same order on
			// every node; operations on different entities may interleave.
			for _, acct := range []string{"x", "y"} {
				if diff := cmp.Diff(entityLog(e.ledgers[e.Nodes[0].Name], acct), entityLog(l, acct)); diff != "" {
					t.Errorf("replica %s applied operations on %s in another order:\n%s", name, acct, diff)
				}
			}
		}
	})
}

func entityLog(l *testledger.Mem, entity string) []string {
	var out []string
	for _, op := range l.Log() {
		if slices.Contains(strings.Fields(op), entity) {
			out = append(out, op)
		}
	}
	return out
}

func scatterAdd() *runtime.MethodDesc {
	m := *testledger.AddMethod
	m.Mode = runtime.ModeScatter
	return &m
}

func hedgeAdd(delay time.Duration) *runtime.MethodDesc {
	m := *testledger.AddMethod
	m.Mode = runtime.ModeHedge
	m.Hedge = delay
	return &m
}

func TestHedgeCancelsTheLoser(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		cancelled := make(chan error, 1)
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			<-ctx.Done() // slow primary: still heartbeating
			cancelled <- ctx.Err()
			return ctx.Err()
		})
		e.ledger.AddMethod = hedgeAdd(20 * time.Millisecond)
		start := time.Now()
		got, err := e.ledger.Add(t.Context(), "acct", 4)
		if err != nil || got != 4 {
			t.Fatalf("Add = %d, %v", got, err)
		}
		if took := time.Since(start); took != 20*time.Millisecond {
			t.Errorf("hedged call took %v, want the hedge delay 20ms", took)
		}
		select {
		case err := <-cancelled:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("loser's context ended with %v, want Canceled", err)
			}
		case <-time.After(time.Second):
			t.Fatal("the losing attempt was not cancelled")
		}
	})
}

func TestPanicFailsOverAndHeldOperationSurvives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		primary := e.ledgers[own[0]]
		release := make(chan struct{})
		primary.SetHook(func(context.Context, string, int64) error {
			<-release
			panic("ledger corrupted")
		})
		var addErr error
		var wg sync.WaitGroup
		wg.Go(func() { _, addErr = e.ledger.Add(t.Context(), "acct", 9) })
		synctest.Wait() // Add is running on the primary
		closeErr := make(chan error, 1)
		go func() { closeErr <- e.ledger.Close(t.Context(), "acct") }()
		synctest.Wait() // Close is held behind it
		if got := primary.Log(); len(got) != 0 {
			t.Fatalf("primary ran %v while an operation was running", got)
		}
		close(release)
		wg.Wait()
		if addErr != nil {
			t.Fatalf("Add after the primary's panic: %v, want the secondary's result", addErr)
		}
		if err := <-closeErr; err != nil {
			t.Fatalf("held Close: %v", err)
		}
		if diff := cmp.Diff([]string{"close acct"}, primary.Log()); diff != "" {
			t.Errorf("held operation lost after the panic:\n%s", diff)
		}
	})
}

func TestHoldIsOvertakenButNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		primary := e.ledgers[own[0]]
		release := blockFirst(primary)
		var wg sync.WaitGroup
		wg.Go(func() { e.ledger.Add(t.Context(), "acct", 1) })
		synctest.Wait()
		wg.Go(func() { e.ledger.Close(t.Context(), "acct") })
		synctest.Wait()
		wg.Go(func() { e.ledger.Add(t.Context(), "acct", 2) })
		synctest.Wait()
		release()
		wg.Wait()
		want := []string{"add acct 1", "add acct 2", "close acct"}
		if diff := cmp.Diff(want, primary.Log()); diff != "" {
			t.Errorf("order (-want +got):\n%s", diff)
		}
	})
}

// blockFirst makes the next Add l runs wait until release is called.
func blockFirst(l *testledger.Mem) (release func()) {
	gate := make(chan struct{})
	var first atomic.Bool
	l.SetHook(func(context.Context, string, int64) error {
		if first.CompareAndSwap(false, true) {
			<-gate
		}
		return nil
	})
	return func() { close(gate) }
}

// frames collects what a raw connection receives.
type frames chan frame.Frame

func (f frames) HandleFrame(_ transport.Conn, fr frame.Frame) {
	if r, ok := fr.(*frame.Result); ok {
		cp := *r
		cp.Payload = append([]byte(nil), r.Payload...)
		f <- &cp
	}
}
func (f frames) HandleClose(transport.Conn, error) {}

func TestRepeatedAttemptExecutesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		node := e.Nodes[0].Name
		gate := make(chan struct{})
		e.ledgers[node].SetHook(func(context.Context, string, int64) error { <-gate; return nil })
		got := make(frames, 3)
		raw := e.Net.Transport(transport.Config{Node: "raw"})
		conn, err := raw.Dial(t.Context(), node, got)
		if err != nil {
			t.Fatal(err)
		}
		a := &frame.Attempt{OpID: [16]byte{7}, Service: "test.Ledger", Method: "Add",
			Entities: []string{"acct"}, Payload: (&testledger.AddArgs{Account: "acct", Amount: 5}).AppendFF(nil)}
		// The second copy joins the running execution; the third, after
		// it finished, is answered from memory.
		for call := uint64(1); call <= 3; call++ {
			a.Call = call
			if err := conn.Send(a); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if call == 2 {
				close(gate)
				synctest.Wait()
			}
		}
		var calls []uint64
		for range 3 {
			r := (<-got).(*frame.Result)
			calls = append(calls, r.Call)
			var res testledger.Int64Result
			if r.Status != frame.StatusOK || res.UnmarshalFF(r.Payload) != nil || res.R0 != 5 {
				t.Errorf("call %d: %+v, want OK 5", r.Call, r)
			}
		}
		slices.Sort(calls)
		if diff := cmp.Diff([]uint64{1, 2, 3}, calls); diff != "" {
			t.Errorf("answered calls:\n%s", diff)
		}
		if n := e.ledgers[node].Executions(); n != 1 {
			t.Errorf("executed %d times, want 1", n)
		}
		if b := e.ledgers[node].Balances()["acct"]; b != 5 {
			t.Errorf("balance %d, want 5", b)
		}
	})
}

// pauseFirstOwner pauses the first owner of "acct" and makes one call to
// it, which fails over on the heartbeat timeout and leaves the owner
// suspected; it returns the owner.
func (e *env) pauseFirstOwner(t *testing.T) string {
	t.Helper()
	own := e.owners(t, "acct")
	e.Net.Pause(own[0])
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
		t.Fatal(err)
	}
	return own[0]
}

func TestSuspectedNodeIsSkippedWithoutWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		first := e.pauseFirstOwner(t)
		start := time.Now()
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("second operation waited %v on a suspected node", took)
		}
		e.Net.Resume(first)
	})
}

func TestProgressReachesNextAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			runtime.ReportProgress(ctx, []byte("step-3"))
			time.Sleep(2 * e.Settings.HeartbeatInterval) // a heartbeat carries it
			e.Net.Pause(own[0])
			<-ctx.Done()
			return ctx.Err()
		})
		var seen *runtime.AttemptInfo
		e.ledgers[own[1]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			seen = runtime.AttemptFrom(ctx)
			return nil
		})
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if seen == nil || string(seen.Progress) != "step-3" || seen.Number != 1 {
			t.Fatalf("next attempt saw %+v, want progress step-3 on attempt 1", seen)
		}
		if len(seen.History) != 1 || seen.History[0].Reason != runtime.ReasonHeartbeatTimeout || seen.History[0].Node != own[0] {
			t.Errorf("history %+v, want one heartbeat timeout on %s", seen.History, own[0])
		}
		e.Net.Resume(own[0])
	})
}

func TestFailoverBudgetStopsAStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.Budget = runtime.BudgetSettings{Rate: 1, Burst: 3}
		e := newEnv(t, fftest.Config{Settings: s})
		for _, l := range e.ledgers {
			l.SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		}
		var budget int
		for range 10 {
			_, err := e.ledger.Add(t.Context(), "acct", 1)
			var fe *runtime.Error
			if errors.As(err, &fe) && fe.Reason == runtime.ReasonBudget {
				budget++
			}
		}
		if budget != 7 {
			t.Errorf("%d operations refused by the budget, want 7 (burst 3 of 10)", budget)
		}
	})
}

func TestForwardMovesTheAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return runtime.ForwardTo(own[1]) })
		got, err := e.ledger.Add(t.Context(), "acct", 2)
		if err != nil || got != 2 {
			t.Fatalf("Add = %d, %v", got, err)
		}
		if b := e.ledgers[own[1]].Balances()["acct"]; b != 2 {
			t.Errorf("forward target balance %d, want 2", b)
		}
		if b := e.ledgers[own[0]].Balances()["acct"]; b != 0 {
			t.Errorf("forwarding node applied the operation: balance %d", b)
		}
	})
}

// A refusal by the node an attempt was forwarded to is that node's, not
// the group's of the node that forwarded it: the operation moves on along
// the order, to the refusing node's group-mate. Taken for the forwarding
// node's group, it made the attempt again at the forwarding node, which
// forwarded it again, until the operation's deadline.
func TestRefusalAfterAForwardMovesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{PerGroup: 2})
		own := e.owners(t, "acct")
		from, to := own[0], own[1]
		var forwards atomic.Int32
		e.ledgers[from].SetHook(func(_ context.Context, account string, _ int64) error {
			if account != "acct" {
				return nil
			}
			if forwards.Add(1) > 1 {
				return errors.New("asked to forward again") // ends the operation
			}
			return runtime.ForwardTo(to)
		})
		// to drains, held open by a call of another entity it runs.
		held := ""
		for i := 0; held == ""; i++ {
			if k := fmt.Sprintf("held-%d", i); e.owners(t, k)[0] == to {
				held = k
			}
		}
		hold := make(chan struct{})
		e.ledgers[to].SetHook(func(_ context.Context, account string, _ int64) error {
			if account == held {
				<-hold
			}
			return nil
		})
		go func() { _, _ = e.ledger.Add(t.Context(), held, 1) }()
		synctest.Wait()
		drained := make(chan error, 1)
		go func() { drained <- e.Node(to).Server.Shutdown(t.Context()) }()
		synctest.Wait()

		got, err := e.ledger.Add(t.Context(), "acct", 2)
		if err != nil || got != 2 {
			t.Errorf("Add = %d, %v; want 2 from %s's group-mate", got, err, to)
		}
		if n := forwards.Load(); n != 1 {
			t.Errorf("%s forwarded the operation %d times, want 1", from, n)
		}
		close(hold)
		if err := <-drained; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for name, l := range e.ledgers {
			if b := l.Balances()["acct"]; b != 0 && (name == from || name == to) {
				t.Errorf("%s holds %d of acct, want nothing", name, b)
			}
		}
	})
}

func TestCallerContextEndsTheOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		for _, l := range e.ledgers {
			l.SetHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return ctx.Err() })
		}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := e.ledger.Add(ctx, "acct", 1)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Errorf("returned after %v, want the caller's 50ms", took)
		}
		if !runtime.MaybeExecuted(err) {
			t.Errorf("an acknowledged attempt must report maybe-executed")
		}
	})
}

func TestNoMemberAnywhereIsErrNoRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		e.Members.Set(nil)
		_, err := e.ledger.Add(t.Context(), "acct", 1)
		if !errors.Is(err, runtime.ErrNoRoute) || runtime.MaybeExecuted(err) {
			t.Fatalf("err = %v, want ErrNoRoute, never delivered", err)
		}
	})
}

// An attempt that waited in its entity's queue past its timeout is not run:
// the client has long failed over.
func TestExpiredQueuedAttemptDoesNotRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.AttemptTimeout = time.Second
		s.OperationTimeout = 2 * time.Second
		e := newEnv(t, fftest.Config{Settings: s})
		own := e.owners(t, "acct")
		primary := e.ledgers[own[0]]
		var slow atomic.Bool
		slow.Store(true)
		primary.SetHook(func(ctx context.Context, _ string, amount int64) error {
			if amount == 1 && slow.CompareAndSwap(true, false) {
				time.Sleep(1500 * time.Millisecond) // ignores its context
			}
			return nil
		})
		var wg sync.WaitGroup
		wg.Go(func() { e.ledger.Add(t.Context(), "acct", 1) })
		synctest.Wait()
		second := make(chan error, 1)
		go func() { _, err := e.ledger.Add(t.Context(), "acct", 2); second <- err }()
		synctest.Wait()
		// The client's Cancel must not be what stops the queued attempt.
		e.Net.Cut("client1", own[0])
		if err := <-second; err != nil {
			t.Fatalf("second Add: %v (want the secondary's answer)", err)
		}
		wg.Wait()
		time.Sleep(time.Second) // the slow handler finishes; the queued one would run now
		if got := primary.Balances()["acct"]; got != 1 {
			t.Errorf("primary balance %d: the expired queued attempt ran", got)
		}
	})
}

// A node that joins the membership again (a restart, a new incarnation)
// is routed to again at once, not after its suspicion expires: whether
// the view showed it gone in between, or never did (a thin client reads
// the view every second; a node restarts in a fraction of that), which
// the view says by the node's JoinedAt. Leaving the view, or a change to
// anything else of the node, leaves the suspicion standing.
func TestRejoinedNodeIsNoLongerSuspected(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stand changes the view without a new join; rejoin then
		// makes one.
		stand, rejoin func(ms *runtime.StaticMembership, m runtime.Member)
	}{
		{"left the view", func(ms *runtime.StaticMembership, m runtime.Member) {
			ms.Remove(m.Name)
		}, func(ms *runtime.StaticMembership, m runtime.Member) {
			ms.Add(m)
		}},
		{"stayed in the view", func(ms *runtime.StaticMembership, m runtime.Member) {
			m.CatchingUp = true
			ms.Add(m)
		}, func(ms *runtime.StaticMembership, m runtime.Member) {
			m.JoinedAt = time.Now()
			ms.Add(m)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fftest.Config{})
				first := e.pauseFirstOwner(t)
				if !e.client.Suspected(first) {
					t.Fatalf("%s not suspected after a heartbeat timeout", first)
				}
				e.Net.Resume(first)
				primary := e.Node(first).Member()
				tc.stand(e.Members, primary)
				synctest.Wait()
				if !e.client.Suspected(first) {
					t.Fatalf("a change to the view other than a new join cleared the suspicion")
				}
				tc.rejoin(e.Members, primary)
				synctest.Wait()
				if e.client.Suspected(first) {
					t.Fatalf("%s still suspected after it joined the membership again", first)
				}
				before := e.ledgers[first].Executions()
				if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
					t.Fatal(err)
				}
				if e.ledgers[first].Executions() != before+1 {
					t.Errorf("the rejoined primary did not get the next operation")
				}
			})
		})
	}
}

// A node the client could not reach is redialed in the background while it
// is suspected, and the suspicion ends with the first dial that gets
// through: a partition between the client and a live node that heals
// costs the operations routed to that node a probe's wait, not the rest
// of SuspectFor. While the partition lasts, the probes fail and the node
// stays suspected.
func TestUnreachableNodeIsForgivenOnceReachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		first := e.cutOffOwner(t, "acct")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if !e.client.Suspected(first) {
			t.Fatalf("%s no longer suspected while it cannot be dialed", first)
		}
		e.Net.Heal("client1", first)
		healed := time.Now()
		for e.client.Suspected(first) {
			if time.Since(healed) > 2*time.Second {
				t.Fatalf("%s still suspected %v after it could be reached again (SuspectFor %v)", first, time.Since(healed), e.Settings.SuspectFor)
			}
			time.Sleep(10 * time.Millisecond)
		}
		before := e.ledgers[first].Executions()
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if e.ledgers[first].Executions() != before+1 {
			t.Errorf("the reachable owner %s did not get the next operation", first)
		}
	})
}

// A redial disproves the suspicion it was started for, and no other: a
// node that could not be dialed, whose suspicion ran out while it still
// could not be, and that then timed out (a stall: it can be dialed, and
// does not answer) stays suspected for the timeout's time even though the
// old redial, still waiting for its next try, gets through.
func TestRedialDisprovesOnlyItsOwnSuspicion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		first := e.cutOffOwner(t, "acct")
		// The suspicion runs out while the node still cannot be dialed,
		// and a stall is suspected right then.
		for e.client.Suspected(first) {
			time.Sleep(time.Millisecond)
		}
		e.client.Suspect(first, runtime.ReasonHeartbeatTimeout)
		placed := time.Now()
		e.Net.Heal("client1", first)
		stall := 4 * e.Settings.HeartbeatTimeout // the first timeout's suspicion
		for time.Since(placed) < stall-10*time.Millisecond {
			if !e.client.Suspected(first) {
				t.Fatalf("%s suspected for a timeout no longer suspected %v later, of %v: a redial for an earlier suspicion cleared it", first, time.Since(placed), stall)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Redirects to a node that cannot be reached dial it at most once a
// heartbeat interval, the background redial's dials included: a stream of
// writes redirected to a leader cut off from this client alone would
// otherwise cost a dial each.
func TestRedirectRedialsAtMostOnceAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		first := e.cutOffOwner(t, "acct")
		window := 3 * time.Second
		retests := 0
		for end := time.Now().Add(window); time.Now().Before(end); {
			if e.client.RedirectRetests(first) {
				retests++
			}
			time.Sleep(time.Millisecond)
		}
		if most := int(window/e.Settings.HeartbeatInterval) + 1; retests == 0 || retests > most {
			t.Errorf("a redirect to %s every millisecond for %v redialed it %d times; want 1 to %d, one a heartbeat interval (%v)", first, window, retests, most, e.Settings.HeartbeatInterval)
		}
	})
}

// Entity queues are recycled: an operation queued on one entity twice (a
// transfer to itself), queues that empty and serve other entities while
// operations wait, and none left behind once everything has run.
func TestEntityQueuesRecycledWithoutLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newReplicatedEnv(t, fftest.Config{})
		own := e.owners(t, "x")
		primary := e.ledgers[own[0]]
		if _, err := e.ledger.Add(t.Context(), "x", 10); err != nil {
			t.Fatal(err)
		}
		release := blockFirst(primary)
		var wg sync.WaitGroup
		wg.Go(func() { e.ledger.Add(t.Context(), "x", 1) }) // blocks: x's queue holds what follows
		synctest.Wait()
		wg.Go(func() {
			if _, err := e.ledger.Transfer(t.Context(), "x", "x", 0); err != nil {
				t.Errorf("transfer x to x: %v", err)
			}
		})
		synctest.Wait()
		for i := range 20 { // each queue made and dropped while x's waits
			if _, err := e.ledger.Add(t.Context(), fmt.Sprintf("y%d", i), 1); err != nil {
				t.Fatal(err)
			}
		}
		wg.Go(func() { e.ledger.Add(t.Context(), "x", 2) })
		synctest.Wait()
		release()
		wg.Wait()
		want := []string{"add x 10", "add x 1", "transfer x x 0", "add x 2"}
		if diff := cmp.Diff(want, entityLog(primary, "x")); diff != "" {
			t.Errorf("x's operations (-want +got):\n%s", diff)
		}
		for _, n := range e.Nodes {
			if q := n.Server.EntityQueues(); q != 0 {
				t.Errorf("%s: %d entity queues left after every operation ended", n.Name, q)
			}
		}
	})
}
