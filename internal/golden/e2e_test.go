package golden

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata" // Europe/Paris whatever the machine has

	"github.com/ffgen/ffgen/internal/golden/testdata/e2e"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// ledger is one node's implementation of e2e.Ledger. hook, if set, runs
// first in every method and its error is returned.
type ledger struct {
	node string
	mu   sync.Mutex
	bal  map[string]int64
	log  []string // method names in execution order
	hook func(ctx context.Context, method string) error
}

var _ e2e.Ledger = (*ledger)(nil)

func (l *ledger) enter(ctx context.Context, method string) error {
	l.mu.Lock()
	l.log = append(l.log, method)
	hook := l.hook
	l.mu.Unlock()
	if hook != nil {
		return hook(ctx, method)
	}
	return nil
}

func (l *ledger) calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

func (l *ledger) Balance(ctx context.Context, id string) (int64, error) {
	if err := l.enter(ctx, "Balance"); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bal[id], nil
}

func (l *ledger) Withdraw(ctx context.Context, w e2e.Withdrawal) (int64, error) {
	if err := l.enter(ctx, "Withdraw"); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bal[w.Account]
	switch {
	case !ok:
		return 0, fmt.Errorf("withdraw: %w", &e2e.NotFoundError{Account: w.Account})
	case w.Amount > 1000:
		return 0, e2e.LimitError{Limit: 1000, Tags: []string{"daily", l.node}}
	case b < w.Amount:
		return 0, e2e.ErrInsufficient
	}
	l.bal[w.Account] = b - w.Amount
	return b - w.Amount, nil
}

func (l *ledger) Deposit(ctx context.Context, id string, amount int64) (int64, error) {
	if err := l.enter(ctx, "Deposit"); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bal[id] += amount
	return l.bal[id], nil
}

func (l *ledger) Close(ctx context.Context, id string) error {
	if err := l.enter(ctx, "Close"); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.bal, id)
	return nil
}

func (l *ledger) Slow(ctx context.Context, id string, d time.Duration) error {
	if err := l.enter(ctx, "Slow"); err != nil {
		return err
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *ledger) Flaky(ctx context.Context, id string, notes ...string) (string, []string, error) {
	if err := l.enter(ctx, "Flaky"); err != nil {
		return "", nil, err
	}
	return l.node, notes, nil
}

func (l *ledger) Echo(ctx context.Context, id string, v e2e.Values) (e2e.Values, error) {
	if err := l.enter(ctx, "Echo"); err != nil {
		return e2e.Values{}, err
	}
	return v, nil
}

type e2eEnv struct {
	*fftest.Cluster
	ledgers map[string]*ledger
	client  *runtime.Client
	ledger  *e2e.LedgerClient
}

// newE2E starts two groups of one node each, serving the generated
// Ledger server, and a generated client; every account starts with 100.
func newE2E(t *testing.T) *e2eEnv {
	t.Helper()
	e := &e2eEnv{Cluster: fftest.New(t, fftest.Config{}), ledgers: map[string]*ledger{}}
	e.Serve(t, e2e.LedgerDesc, func(n *fftest.Node) any {
		l := &ledger{node: n.Name, bal: map[string]int64{"acct": 100}}
		e.ledgers[n.Name] = l
		return l
	})
	e.client = e.Client(t)
	e.ledger = e2e.NewLedgerClient(e.client)
	synctest.Wait()
	return e
}

// owners returns the owner of the entity in each group, in failover order.
func (e *e2eEnv) owners(t *testing.T, entity string) (primary, secondary *ledger) {
	t.Helper()
	owners := e.Owners(e2e.LedgerDesc.Name, entity)
	if len(owners) != 2 {
		t.Fatalf("owners of %q: %v, want one in each group", entity, owners)
	}
	return e.ledgers[owners[0]], e.ledgers[owners[1]]
}

func TestE2ERegister(t *testing.T) {
	s := runtime.NewServer(runtime.ServerConfig{})
	if err := e2e.RegisterLedgerServer(s, &ledger{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Services(); !slices.Contains(got, "e2e.Ledger") {
		t.Errorf("Services() = %v, want e2e.Ledger", got)
	}
}

func TestE2EResultAndFailErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		primary, secondary := e.owners(t, "acct")
		got, err := e.ledger.Withdraw(t.Context(), e2e.Withdrawal{Account: "acct", Amount: 30})
		if err != nil || got != 70 {
			t.Fatalf("Withdraw = %d, %v; want 70, nil", got, err)
		}
		// A declared value error comes back as itself.
		_, err = e.ledger.Withdraw(t.Context(), e2e.Withdrawal{Account: "acct", Amount: 500})
		if !errors.Is(err, e2e.ErrInsufficient) {
			t.Fatalf("err = %v, want ErrInsufficient", err)
		}
		// A declared pointer error type, wrapped by the handler, keeps its fields.
		_, err = e.ledger.Withdraw(t.Context(), e2e.Withdrawal{Account: "nobody", Amount: 1})
		var nf *e2e.NotFoundError
		if !errors.As(err, &nf) || nf.Account != "nobody" {
			t.Fatalf("err = %v, want *NotFoundError{nobody}", err)
		}
		// A declared value error type keeps its fields, slices included.
		_, err = e.ledger.Withdraw(t.Context(), e2e.Withdrawal{Account: "acct", Amount: 5000})
		var le e2e.LimitError
		if !errors.As(err, &le) || le.Limit != 1000 || !slices.Equal(le.Tags, []string{"daily", primary.node}) {
			t.Fatalf("err = %#v, want LimitError{1000, [daily %s]}", err, primary.node)
		}
		if c := secondary.calls(); len(c) != 0 {
			t.Errorf("Fail errors reached the secondary: %v", c)
		}
	})
}

func TestE2EFailoverError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		primary, secondary := e.owners(t, "acct")
		primary.hook = func(context.Context, string) error { return e2e.ErrBusy }
		got, err := e.ledger.Withdraw(t.Context(), e2e.Withdrawal{Account: "acct", Amount: 10})
		if err != nil || got != 90 {
			t.Fatalf("Withdraw = %d, %v; want 90 from the secondary", got, err)
		}
		if p, s := primary.calls(), secondary.calls(); len(p) != 1 || len(s) != 1 {
			t.Errorf("calls: primary %v, secondary %v; want one each", p, s)
		}
	})
}

func TestE2EDefaultFailoverAndVariadic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		primary, secondary := e.owners(t, "x")
		primary.hook = func(context.Context, string) error { return errors.New("undeclared") }
		node, notes, err := e.ledger.Flaky(t.Context(), "x", "a", "b")
		if err != nil || node != secondary.node || !slices.Equal(notes, []string{"a", "b"}) {
			t.Fatalf("Flaky = %q, %q, %v; want %s, [a b]", node, notes, err, secondary.node)
		}
		// With every node failing, the undeclared error surfaces remotely.
		secondary.hook = primary.hook
		_, _, err = e.ledger.Flaky(t.Context(), "x")
		var re *runtime.RemoteError
		if !errors.As(err, &re) || re.Message != "undeclared" {
			t.Fatalf("err = %v, want a RemoteError with the handler's message", err)
		}
	})
}

func TestE2EScatterReachesEveryNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		got, err := e.ledger.Deposit(t.Context(), "acct", 5)
		if err != nil || got != 105 {
			t.Fatalf("Deposit = %d, %v; want 105", got, err)
		}
		synctest.Wait() // the losers run to completion too
		for name, l := range e.ledgers {
			l.mu.Lock()
			b := l.bal["acct"]
			l.mu.Unlock()
			if b != 105 {
				t.Errorf("%s has %d, want 105 on every node", name, b)
			}
		}
	})
}

func TestE2EHedgeOfEmbeddedMethod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		primary, secondary := e.owners(t, "acct")
		secondary.mu.Lock()
		secondary.bal["acct"] = 7 // tells the answers apart
		secondary.mu.Unlock()
		primary.hook = func(ctx context.Context, _ string) error {
			select {
			case <-time.After(time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		start := time.Now()
		got, err := e.ledger.Balance(t.Context(), "acct")
		if err != nil || got != 7 {
			t.Fatalf("Balance = %d, %v; want 7 from the hedged secondary", got, err)
		}
		if took := time.Since(start); took < 30*time.Millisecond || took > 40*time.Millisecond {
			t.Errorf("hedged answer after %v, want just after the 30ms hedge delay", took)
		}
	})
}

func TestE2EMethodTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		start := time.Now()
		err := e.ledger.Slow(t.Context(), "acct", time.Second)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a deadline error", err)
		}
		// operation=500ms bounds the whole call; attempt=300ms each try.
		if took < 500*time.Millisecond || took > 510*time.Millisecond {
			t.Errorf("Slow returned after %v, want the operation timeout, 500ms", took)
		}
		var fe *runtime.Error
		if !errors.As(err, &fe) || len(fe.History) != 2 {
			t.Fatalf("err = %v, want a runtime.Error with 2 attempts (failovers=1)", err)
		}
	})
}

func TestE2EHoldWaitsForTheEntity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		primary, _ := e.owners(t, "acct")
		release := make(chan struct{})
		primary.hook = func(ctx context.Context, method string) error {
			if method == "Withdraw" {
				<-release
			}
			return nil
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := e.ledger.Withdraw(context.Background(), e2e.Withdrawal{Account: "acct", Amount: 1}); err != nil {
				t.Errorf("Withdraw: %v", err)
			}
		})
		synctest.Wait() // Withdraw runs and blocks
		wg.Go(func() {
			if err := e.ledger.Close(context.Background(), "acct"); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		time.Sleep(50 * time.Millisecond) // well under the heartbeat timeout
		synctest.Wait()
		if c := primary.calls(); !slices.Equal(c, []string{"Withdraw"}) {
			t.Fatalf("calls while Withdraw runs = %v, want Close held", c)
		}
		close(release)
		wg.Wait()
		if c := primary.calls(); !slices.Equal(c, []string{"Withdraw", "Close"}) {
			t.Errorf("calls = %v, want Withdraw then Close", c)
		}
	})
}

// A call of a method whose //ff:timeout conflicts with the client's
// settings fails at once, naming the method, and nothing is sent: Slow's
// heartbeat=250ms is less than twice this client's heartbeat interval. The
// client is made, and its other methods are not affected.
func TestE2EConflictingMethodSettingsFailTheirCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		s := e.Settings
		s.HeartbeatInterval, s.HeartbeatTimeout = 150*time.Millisecond, 400*time.Millisecond
		rc := e.Client(t, func(cfg *runtime.ClientConfig) { cfg.Settings = s })
		ledger := e2e.NewLedgerClient(rc)
		err := ledger.Slow(context.Background(), "acct", time.Millisecond)
		if !errors.Is(err, runtime.ErrInvalidSettings) || !strings.Contains(err.Error(), "method e2e.Ledger.Slow: ") {
			t.Fatalf("Slow = %v, want ErrInvalidSettings naming e2e.Ledger.Slow", err)
		}
		for name, l := range e.ledgers {
			if calls := l.calls(); len(calls) != 0 {
				t.Fatalf("%s ran %v, want nothing", name, calls)
			}
		}
		if _, err := ledger.Deposit(context.Background(), "acct", 5); err != nil {
			t.Fatalf("Deposit = %v, want it to run", err)
		}
	})
}

// A time keeps its location and an error value the errno and sentinels of
// its chain, there and back.
func TestE2EValuesKeepLocationAndErrorChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newE2E(t)
		paris, err := time.LoadLocation("Europe/Paris")
		if err != nil {
			t.Fatal(err)
		}
		in := e2e.Values{
			At:  time.Date(2024, 10, 27, 2, 30, 0, 0, paris),
			Err: fmt.Errorf("dial: %w", &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}),
		}
		out, err := e.ledger.Echo(t.Context(), "acct", in)
		if err != nil {
			t.Fatal(err)
		}
		if !out.At.Equal(in.At) || out.At.Location().String() != "Europe/Paris" {
			t.Errorf("At = %v in %s, want %v in Europe/Paris", out.At, out.At.Location(), in.At)
		}
		if out.Err == nil || out.Err.Error() != in.Err.Error() || !errors.Is(out.Err, syscall.ECONNREFUSED) {
			t.Errorf("Err = %v, want %q matching syscall.ECONNREFUSED", out.Err, in.Err)
		}
		if out, err := e.ledger.Echo(t.Context(), "acct", e2e.Values{}); err != nil || out.Err != nil || !out.At.IsZero() {
			t.Errorf("zero Values = %+v, %v", out, err)
		}
	})
}
