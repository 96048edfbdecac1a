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
)

// Tests of what an operation reports about itself when it ends without an
// answer: the reason, the delivery and the history must say what happened.

// wantError returns err as an *Error or fails the test.
func wantError(t *testing.T, err error) *runtime.Error {
	t.Helper()
	var re *runtime.Error
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a *runtime.Error", err)
	}
	return re
}

// A caller that cancels an operation whose attempt was sent is never told
// "not delivered": the attempt may run (a replicated write runs everywhere
// once sequenced), so a retry with a new operation ID could apply it twice.
// Every sent attempt is in the history, and the reason is the cancel.
func TestCancelledOperationWasDelivered(t *testing.T) {
	for _, mode := range []string{"failover", "hedge", "scatter"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newReplicatedEnv(t, fftest.Config{})
				// Connections are up: the attempt is sent, not dialed.
				if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
					t.Fatal(err)
				}
				if _, err := e.ledger.Transfer(t.Context(), "x", "y", 0); err != nil {
					t.Fatal(err)
				}
				waitTransfers(t, e, 1)
				for _, n := range e.Nodes {
					e.Net.Pause(n.Name)
				}
				ctx, cancel := context.WithCancel(t.Context())
				time.AfterFunc(50*time.Millisecond, cancel)
				var err error
				switch mode {
				case "failover":
					_, err = e.ledger.Add(ctx, "acct", 1)
				case "hedge":
					err = e.client.Invoke(ctx, hedgeAdd(20*time.Millisecond), &testledger.AddArgs{Account: "acct", Amount: 1}, &testledger.Int64Result{})
				case "scatter":
					_, err = e.ledger.Transfer(ctx, "x", "y", 0)
				}
				for _, n := range e.Nodes {
					e.Net.Resume(n.Name)
				}
				re := wantError(t, err)
				if !runtime.MaybeExecuted(err) || re.Delivery == runtime.NotDelivered {
					t.Errorf("a sent attempt reported as %s (MaybeExecuted %v): %v", re.Delivery, runtime.MaybeExecuted(err), err)
				}
				if re.Reason != runtime.ReasonCancelled || !errors.Is(err, context.Canceled) {
					t.Errorf("reason %s, want cancelled matching context.Canceled: %v", re.Reason, err)
				}
				sent := 0
				for _, h := range re.History {
					if h.Node == "" || h.Reason != runtime.ReasonCancelled {
						t.Errorf("history entry %+v: want a sent attempt ended by the cancel", h)
					}
					sent++
				}
				want := 1
				if mode == "hedge" {
					want = 2 // the hedge started the second group at 20ms
				}
				if sent != want {
					t.Errorf("%d attempt(s) in the history, want %d: %v", sent, want, err)
				}
				if mode == "scatter" {
					// What made "not delivered" dangerous: the write
					// runs on every replica all the same.
					waitTransfers(t, e, 2)
				}
				// The resumed nodes finish what they were sent before the
				// cluster shuts down: a replicated write that a follower
				// applies while its server shuts down races the shutdown.
				time.Sleep(time.Second)
				synctest.Wait()
			})
		})
	}
}

// waitTransfers waits until every node's ledger has run n transfers.
func waitTransfers(t *testing.T, e *env, n int) {
	t.Helper()
	ran := func() bool {
		for _, l := range e.ledgers {
			got := 0
			for _, op := range l.Log() {
				if strings.HasPrefix(op, "transfer ") {
					got++
				}
			}
			if got != n {
				return false
			}
		}
		return true
	}
	if !testkit.Within(10*time.Second, ran) {
		t.Fatalf("not every replica ran %d transfers within 10s", n)
	}
}

// An attempt whose time runs out while the handler runs is an attempt
// timeout, end to end: history, error and suspicion. The server's own
// "handler stopped" answer, sent at the same instant, can be read before
// the client's timer fires on a busy machine; in a bubble the timer always
// wins, so TestStoppedAnswerAtTheAttemptEndIsATimeout puts the answer first.
func TestAttemptTimeoutIsNotAFailoverError(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := runtime.DefaultSettings()
				s.AttemptTimeout = time.Second
				s.MaxFailovers = 0
				e := newEnv(t, fftest.Config{Settings: s})
				own := e.owners(t, "acct")
				e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
					<-ctx.Done() // alive and heartbeating, but stuck
					return ctx.Err()
				})
				_, err := e.ledger.Add(t.Context(), "acct", 1)
				re := wantError(t, err)
				if re.Reason != runtime.ReasonAttemptTimeout || len(re.History) != 1 || re.History[0].Reason != runtime.ReasonAttemptTimeout {
					t.Fatalf("got %v; want one attempt ended by attempt-timeout", err)
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err does not match context.DeadlineExceeded: %v", err)
				}
				if !e.client.Suspected(own[0]) {
					t.Errorf("%s not suspected after its attempt timed out", own[0])
				}
			})
		})
	}
}

// A caller deadline that ends the first attempt ends the operation: no
// second attempt is started, or recorded, without time to send it, and the
// first is not blamed on the node (no attempt-timeout, no failover-error).
func TestCallerDeadlineAddsNoPhantomAttempt(t *testing.T) {
	for i := range 10 { // the caller's deadline, the attempt timer and the server's answer share one instant
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fftest.Config{})
				own := e.owners(t, "acct")
				e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
					<-ctx.Done()
					return ctx.Err()
				})
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				_, err := e.ledger.Add(ctx, "acct", 1)
				re := wantError(t, err)
				if re.Reason != runtime.ReasonDeadline || len(re.History) != 1 ||
					re.History[0].Node != own[0] || re.History[0].Reason != runtime.ReasonDeadline {
					t.Fatalf("got %v; want deadline after the one attempt sent, itself ended by the deadline", err)
				}
				if !errors.Is(err, context.DeadlineExceeded) || re.Delivery == runtime.NotDelivered {
					t.Errorf("got %v; want context.DeadlineExceeded and a delivered attempt", err)
				}
				if e.client.Suspected(own[0]) {
					t.Errorf("%s suspected for the caller's deadline", own[0])
				}
			})
		})
	}
}

// A context that ended before Invoke adds no attempt to the history, in any
// mode: nothing was sent.
func TestEndedContextMakesNoAttempt(t *testing.T) {
	for _, m := range []*runtime.MethodDesc{testledger.AddMethod, hedgeAdd(time.Millisecond), testledger.TransferMethod} {
		t.Run(m.Mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fftest.Config{})
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				args := &testledger.TransferArgs{From: "x", To: "y"}
				var err error
				if m == testledger.TransferMethod {
					err = e.client.Invoke(ctx, m, args, &testledger.Int64Result{})
				} else {
					err = e.client.Invoke(ctx, m, &testledger.AddArgs{Account: "x"}, &testledger.Int64Result{})
				}
				re := wantError(t, err)
				if re.Reason != runtime.ReasonCancelled || len(re.History) != 0 || runtime.MaybeExecuted(err) || errors.Is(err, runtime.ErrNoRoute) {
					t.Errorf("got %v; want cancelled after 0 attempts, not delivered", err)
				}
			})
		})
	}
}

// A cancel that comes while a failover waits for a budget token is a
// cancel, not a spent budget.
func TestCancelDuringBudgetWaitIsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.SuspectFor = 0
		s.Budget = runtime.BudgetSettings{Rate: 1, Burst: 1, Wait: 5 * time.Second}
		e := newEnv(t, fftest.Config{Settings: s})
		for _, l := range e.ledgers {
			l.SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		}
		e.ledger.Add(t.Context(), "acct", 1) // spends the one token
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := e.ledger.Add(ctx, "acct", 1)
		re := wantError(t, err)
		if re.Reason != runtime.ReasonCancelled || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v; want cancelled", err)
		}
	})
}

// Invoke after Close fails at once with ErrClientClosed: no dial, no node
// suspected, nothing delivered.
func TestInvokeAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testkit.LogBuffer
		e := &env{Cluster: fftest.New(t, fftest.Config{}), ledgers: map[string]*testledger.Mem{}}
		e.Serve(t, testledger.Desc, func(n *fftest.Node) any { return testledger.NewMem(n.Name) })
		c := e.Client(t, func(cfg *runtime.ClientConfig) { cfg.Logger = logs.Logger() })
		synctest.Wait()
		c.Close()
		start := time.Now()
		_, err := testledger.NewClient(c).Add(t.Context(), "acct", 1)
		if !errors.Is(err, runtime.ErrClientClosed) || runtime.MaybeExecuted(err) {
			t.Errorf("err = %v; want ErrClientClosed, not executed", err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("Invoke after Close took %v, want no waiting", took)
		}
		if got := logs.String(); got != "" {
			t.Errorf("Invoke after Close logged:\n%s", got)
		}
	})
}

// Operations in flight when the client closes end with ErrClientClosed and
// do not fail over, nor count a failover; the node they ran on is not
// suspected.
func TestCloseEndsOperationsInFlight(t *testing.T) {
	for _, m := range []*runtime.MethodDesc{testledger.AddMethod, hedgeAdd(time.Second)} {
		t.Run(m.Mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEnv(t, fftest.Config{})
				own := e.owners(t, "acct")
				e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
					<-ctx.Done()
					return ctx.Err()
				})
				failovers := &failoverCounter{}
				c := e.Client(t, func(cfg *runtime.ClientConfig) { cfg.Metrics = failovers })
				synctest.Wait()
				time.AfterFunc(50*time.Millisecond, func() { c.Close() })
				err := c.Invoke(t.Context(), m, &testledger.AddArgs{Account: "acct", Amount: 1}, &testledger.Int64Result{})
				re := wantError(t, err)
				if !errors.Is(err, runtime.ErrClientClosed) || re.Reason != runtime.ReasonClosed || len(re.History) != 1 || !runtime.MaybeExecuted(err) {
					t.Errorf("got %v; want client-closed after the one attempt, maybe executed", err)
				}
				if c.Suspected(own[0]) || e.ledgers[own[1]].Executions() != 0 || failovers.n.Load() != 0 {
					t.Errorf("closing blamed %s, failed over to %s or counted %d failovers", own[0], own[1], failovers.n.Load())
				}
			})
		})
	}
}

type failoverCounter struct {
	runtime.NopMetrics
	n atomic.Int32
}

func (f *failoverCounter) Failover(string, string, runtime.Reason) { f.n.Add(1) }

// Every sentinel error of the runtime carries the package prefix, and the
// errors the runtime wraps them in still match them.
func TestSentinelErrorsArePrefixed(t *testing.T) {
	for _, err := range []error{runtime.ErrNoRoute, runtime.ErrBudgetExhausted, runtime.ErrInvalidSettings, runtime.ErrClientClosed} {
		if !strings.HasPrefix(err.Error(), "ffgen: ") {
			t.Errorf("%q lacks the ffgen: prefix", err)
		}
	}
	b := runtime.NewBudget(runtime.BudgetSettings{Rate: 1, Burst: 1})
	b.Take(context.Background())
	if err := b.Take(context.Background()); !errors.Is(err, runtime.ErrBudgetExhausted) {
		t.Errorf("Take on an empty bucket = %v, want ErrBudgetExhausted", err)
	}
	if err := (runtime.Settings{}).Validate(); !errors.Is(err, runtime.ErrInvalidSettings) {
		t.Errorf("Validate = %v, want ErrInvalidSettings", err)
	}
}

// The suspicion warning names the suspected node as the peer: a client's
// logger that carries its own node attribute does not get a second one.
func TestSuspicionLogNamesThePeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testkit.LogBuffer
		e := &env{Cluster: fftest.New(t, fftest.Config{}), ledgers: map[string]*testledger.Mem{}}
		e.Serve(t, testledger.Desc, func(n *fftest.Node) any { return testledger.NewMem(n.Name) })
		c := e.Client(t, func(cfg *runtime.ClientConfig) { cfg.Logger = logs.Logger().With("node", "client1") })
		synctest.Wait()
		e.client = c
		own := e.owners(t, "acct")
		e.Crash(own[0])
		if _, err := testledger.NewClient(c).Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		out := logs.String()
		if !strings.Contains(out, "node suspected") || strings.Count(out, "node=") != 1 || !strings.Contains(out, "peer="+own[0]) {
			t.Errorf("suspicion logged as:\n%s\nwant node=client1 once and peer=%s", out, own[0])
		}
	})
}

// refusalCounter counts the refusals a server reports to its metrics.
type refusalCounter struct {
	runtime.NopMetrics
	mu      sync.Mutex
	refused map[string]int // "service.method code"
}

func (m *refusalCounter) Handled(service, method, status, code string, _ time.Duration) {
	if status != "refused" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused[service+"."+method+" "+code]++
}

// An operation every node refused before running anything (here: none of
// them serves the method) did not execute: MaybeExecuted is false, the
// error says refused, and each server counts the refusal for its operator.
func TestRefusedEverywhereWasNotExecuted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		metrics := &refusalCounter{refused: map[string]int{}}
		c := fftest.New(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) { cfg.Metrics = metrics }})
		// The nodes serve test.Ledger, without its Close.
		c.Serve(t, &runtime.ServiceDesc{Name: testledger.Desc.Name, Methods: []*runtime.MethodDesc{testledger.AddMethod}},
			func(n *fftest.Node) any { return testledger.NewMem(n.Name) })
		ledger := testledger.NewClient(c.Client(t))
		err := ledger.Close(t.Context(), "acct")
		re := wantError(t, err)
		if runtime.MaybeExecuted(err) || re.Delivery != runtime.Refused || re.Reason != runtime.ReasonRefused || len(re.History) != 2 {
			t.Fatalf("Close on nodes that do not serve it: %v (delivery %s, MaybeExecuted %v); want refused by both, not executed",
				err, re.Delivery, runtime.MaybeExecuted(err))
		}
		metrics.mu.Lock()
		defer metrics.mu.Unlock()
		if n := metrics.refused["test.Ledger.Close ffgen.unknown-method"]; n != 2 {
			t.Errorf("the servers counted %v; want 2 refusals of test.Ledger.Close", metrics.refused)
		}
	})
}

// An attempt still queued behind a stuck operation when its time runs out
// never ran: the node says so before the client's own timer gives up on it,
// so the operation is not reported acknowledged and MaybeExecuted is false,
// although the node acknowledged the attempt when it queued it. The
// server counts it as refused, beside its other refusals.
func TestExpiredWhileQueuedWasNotExecuted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		metrics := &refusalCounter{refused: map[string]int{}}
		s := runtime.DefaultSettings()
		s.AttemptTimeout = time.Second
		s.MaxFailovers = 0
		e := newEnv(t, fftest.Config{Settings: s, Server: func(_ string, cfg *runtime.ServerConfig) { cfg.Metrics = metrics }})
		own := e.owners(t, "acct")
		release := make(chan struct{})
		var runs atomic.Int32
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, amount int64) error {
			runs.Add(1)
			if amount == 1 {
				<-release // the first Add holds the entity
			}
			return nil
		})
		first := make(chan error, 1)
		go func() {
			_, err := e.ledger.Add(context.Background(), "acct", 1)
			first <- err
		}()
		synctest.Wait()
		_, err := e.ledger.Add(t.Context(), "acct", 2)
		re := wantError(t, err)
		if runtime.MaybeExecuted(err) || re.Delivery != runtime.Refused {
			t.Errorf("an attempt that expired in the queue: delivery %s, MaybeExecuted %v (%v); want refused, not executed",
				re.Delivery, runtime.MaybeExecuted(err), err)
		}
		if re.Reason != runtime.ReasonAttemptTimeout || !errors.Is(err, context.DeadlineExceeded) || len(re.History) != 1 {
			t.Errorf("got %v; want one attempt ended by its attempt timeout", err)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times; want once (the first Add only)", n)
		}
		close(release)
		<-first // it outlived its own attempt timeout; it ran, whatever it answers
		metrics.mu.Lock()
		defer metrics.mu.Unlock()
		if n := metrics.refused["test.Ledger.Add ffgen.not-started"]; n != 1 {
			t.Errorf("the server counted %v; want 1 refusal of test.Ledger.Add as not started", metrics.refused)
		}
	})
}

// reportingMembership is a membership that hears of the client's
// failovers, as runtime/cluster's do.
type reportingMembership struct {
	runtime.Membership
	mu  sync.Mutex
	got []string
}

func (m *reportingMembership) ReportFailover(service, method string, r runtime.Reason) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, service+"."+method+" "+r.String())
}

// A client tells a membership that listens of each failover it makes, so
// that a node's page can show failovers only clients saw.
func TestFailoverReportedToMembership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		m := &reportingMembership{Membership: e.Members}
		ledger := testledger.NewClient(e.Client(t, func(cfg *runtime.ClientConfig) { cfg.Membership = m }))
		synctest.Wait()
		e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		if _, err := ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if len(m.got) != 1 || m.got[0] != "test.Ledger.Add failover-error" {
			t.Fatalf("the membership heard %v; want one failover of test.Ledger.Add after failover-error", m.got)
		}
	})
}
