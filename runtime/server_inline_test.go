package runtime_test

// Handlers run on their connection's read goroutine, over TCP: the
// in-memory network the synctest suite runs on does not lend its reader,
// so only these tests take that path. A method starts out quick, so the
// first call of each method on a fresh server runs inline; each test
// checks that its handler did, so that it cannot pass by running on a
// worker.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// waitLimit bounds every wait: generous, since it only turns a hang into a
// failure.
const waitLimit = 10 * time.Second

// onReadGoroutine reports whether the caller runs on a connection's read
// goroutine, as an inline handler does.
func onReadGoroutine() bool {
	pcs := make([]uintptr, 64)
	frames := goruntime.CallersFrames(pcs[:goruntime.Callers(1, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "/runtime/transport.(*stream).readLoop") {
			return true
		}
		if !more {
			return false
		}
	}
}

// watchedClient is a second client of e whose attempts log records.
func watchedClient(t *testing.T, e *tcpEnv) (*testledger.Client, *runtime.Client, *attemptLog) {
	log := new(attemptLog)
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "watched", Group: "clients", Logger: testkit.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := runtime.NewClient(runtime.ClientConfig{Transport: tp, Membership: e.members, Settings: e.s, Logger: testkit.Logger(t),
		AttemptInterceptors: []runtime.AttemptInterceptor{log.intercept}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return testledger.NewClient(c), c, log
}

// attemptLog records every attempt a client makes and how it ended.
type attemptLog struct {
	mu       sync.Mutex
	attempts []string
	errs     []error
}

func (a *attemptLog) intercept(ctx context.Context, ca *runtime.ClientAttempt, next func(context.Context) runtime.AttemptResult) runtime.AttemptResult {
	r := next(ctx)
	a.mu.Lock()
	a.attempts = append(a.attempts, ca.Node+" "+r.Reason.String())
	a.errs = append(a.errs, r.Err)
	a.mu.Unlock()
	return r
}

// take returns the attempts logged so far, as "node reason", and their
// errors, and forgets them.
func (a *attemptLog) take() ([]string, []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, errs := a.attempts, a.errs
	a.attempts, a.errs = nil, nil
	return at, errs
}

// sameOwner returns an entity named after prefix whose owner in its first
// group is entity's.
func sameOwner(t *testing.T, e *tcpEnv, entity, prefix string) string {
	want := e.owners(t, entity)[0]
	for i := range 1000 {
		other := prefix + strconv.Itoa(i)
		if e.owners(t, other)[0] == want {
			return other
		}
	}
	t.Fatalf("no entity %s... is owned by %s", prefix, want)
	return ""
}

type addResult struct {
	balance int64
	err     error
}

func goAdd(x *testledger.Client, account string, amount int64) <-chan addResult {
	done := make(chan addResult, 1)
	go func() {
		got, err := x.Add(context.Background(), account, amount)
		done <- addResult{got, err}
	}()
	return done
}

// blockingHook returns a ledger hook that, for account only, reports
// whether it runs inline and then blocks until release is closed or it
// is cancelled.
func blockingHook(account string, inline chan<- bool, release <-chan struct{}) func(context.Context, string, int64) error {
	return func(ctx context.Context, acct string, _ int64) error {
		if acct != account {
			return nil
		}
		inline <- onReadGoroutine()
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A quick method's handler that blocks holds its connection's reader only
// for the grace: a call of another entity on the same connection is
// answered while it blocks.
func TestTCPInlineHandlerThatBlocksDelaysNoOtherCall(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "slow")
	fast := sameOwner(t, e, "slow", "fast-")
	x, _, log := watchedClient(t, e)
	inline := make(chan bool, 1)
	release := make(chan struct{})
	e.ledgers[own[0]].SetHook(blockingHook("slow", inline, release))
	slow := goAdd(x, "slow", 5)
	if !testkit.Receive(t, inline, "the slow handler to start") {
		t.Fatal("the slow handler ran on a worker, not inline: the test covers nothing")
	}
	for want := int64(1); want <= 3; want++ {
		select {
		case r := <-goAdd(x, fast, 1):
			if r.err != nil || r.balance != want {
				t.Fatalf("Add(%s) while slow blocks = %d, %v; want %d", fast, r.balance, r.err, want)
			}
		case r := <-slow:
			t.Fatalf("Add(slow) ended before its release: %d, %v", r.balance, r.err)
		case <-time.After(waitLimit):
			t.Fatalf("Add(%s) waited behind the blocked handler", fast)
		}
	}
	close(release)
	if r := testkit.Receive(t, slow, "Add(slow) after its release"); r.err != nil || r.balance != 5 {
		t.Fatalf("Add(slow) = %d, %v; want 5", r.balance, r.err)
	}
	want := []string{own[0] + " none", own[0] + " none", own[0] + " none", own[0] + " none"}
	if got, _ := log.take(); !slices.Equal(got, want) {
		t.Errorf("attempts %q, want each answered by %s at once: %q", got, own[0], want)
	}
	if got := e.ledgers[own[0]].Balances(); got["slow"] != 5 || got[fast] != 3 {
		t.Errorf("balances on %s %v, want slow 5, %s 3", own[0], got, fast)
	}
}

// The moment a quick method's handler overruns the grace, the method
// counts as slow: a second call of it that blocks too, arriving while the
// first still blocks, runs on a worker and holds the reader for no grace
// of its own. Before, only a handler's return was counted, so a burst of
// blocked calls each held the reader in turn, and every frame behind them
// waited a grace per call.
func TestTCPInlineOverrunMarksTheMethodSlowAtOnce(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "slow")
	second := sameOwner(t, e, "slow", "slow-too-")
	fast := sameOwner(t, e, "slow", "fast-")
	x, _, _ := watchedClient(t, e)
	inline := make(chan bool, 2)
	release := make(chan struct{})
	first := blockingHook("slow", inline, release)
	then := blockingHook(second, inline, release)
	e.ledgers[own[0]].SetHook(func(ctx context.Context, acct string, n int64) error {
		if acct == second {
			return then(ctx, acct, n)
		}
		return first(ctx, acct, n)
	})
	slow := goAdd(x, "slow", 5)
	if !testkit.Receive(t, inline, "the first handler to start") {
		t.Fatal("the first handler ran on a worker, not inline: the test covers nothing")
	}
	// A call answered while the first blocks: the reading was handed on,
	// so the first has overrun.
	if r := testkit.Receive(t, goAdd(x, fast, 1), "Add("+fast+")"); r.err != nil || r.balance != 1 {
		t.Fatalf("Add(%s) = %d, %v; want 1", fast, r.balance, r.err)
	}
	other := goAdd(x, second, 7)
	if testkit.Receive(t, inline, "the second handler to start") {
		t.Error("the second blocking call ran inline: the first one's overrun was not counted")
	}
	close(release)
	for _, c := range []struct {
		ch   <-chan addResult
		want int64
	}{{slow, 5}, {other, 7}} {
		if r := testkit.Receive(t, c.ch, "a blocked call after its release"); r.err != nil || r.balance != c.want {
			t.Errorf("blocked Add = %d, %v; want %d", r.balance, r.err, c.want)
		}
	}
}

// A handler that panics on the read goroutine answers with the panic, and
// the connection and its reader carry on.
func TestTCPInlineHandlerPanics(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "boom")
	x, _, log := watchedClient(t, e)
	inline := make(chan bool, 1)
	var once sync.Once
	e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error {
		once.Do(func() {
			inline <- onReadGoroutine()
			panic("ledger corrupted")
		})
		return nil
	})
	if got, err := x.Add(t.Context(), "boom", 1); err != nil || got != 1 {
		t.Fatalf("Add = %d, %v; want the secondary's 1", got, err)
	}
	if !testkit.Receive(t, inline, "the handler to run") {
		t.Fatal("the panicking handler ran on a worker, not inline: the test covers nothing")
	}
	attempts, errs := log.take()
	if want := []string{own[0] + " panic", own[1] + " none"}; !slices.Equal(attempts, want) {
		t.Fatalf("attempts %q, want %q", attempts, want)
	}
	var re *runtime.RemoteError
	if !errors.As(errs[0], &re) || re.Node != own[0] || !strings.Contains(re.Message, "handler panicked: ledger corrupted") {
		t.Fatalf("the panicking attempt's error %v, want a *runtime.RemoteError from %s with the panic", errs[0], own[0])
	}
	// The primary answers on the connection the panic happened on.
	for want := int64(2); want <= 6; want += 2 {
		if got, err := x.Add(t.Context(), "boom", 2); err != nil || got != want {
			t.Fatalf("Add after the panic = %d, %v; want %d", got, err, want)
		}
	}
	if attempts, _ := log.take(); !slices.Equal(attempts, []string{own[0] + " none", own[0] + " none", own[0] + " none"}) {
		t.Errorf("attempts after the panic %q, want each answered by %s", attempts, own[0])
	}
}

// A caller that gives up on a call whose handler blocks inline stops the
// handler: its Cancel is read by the goroutine the reading was handed to.
func TestTCPInlineHandlerIsCancelled(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "acct")
	inline := make(chan bool, 1)
	ended := make(chan error, 1)
	e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
		inline <- onReadGoroutine()
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.ledger.Add(ctx, "acct", 1)
		done <- err
	}()
	if !testkit.Receive(t, inline, "the handler to start") {
		t.Fatal("the handler ran on a worker, not inline: the test covers nothing")
	}
	cancel()
	if err := testkit.Receive(t, done, "Add to end"); !errors.Is(err, context.Canceled) {
		t.Errorf("Add after its context was cancelled: %v, want context.Canceled", err)
	}
	if err := testkit.Receive(t, ended, "the handler to be stopped"); !errors.Is(err, context.Canceled) {
		t.Errorf("the handler's context ended with %v, want Canceled (not its deadline)", err)
	}
}

// A handler run inline for many heartbeat timeouts keeps its attempt
// alive: the ack queued before it ran goes out at the handover, and the
// heartbeats flow beside it. The call succeeds with its first attempt.
func TestTCPInlineLongHandlerIsNotFailedOver(t *testing.T) {
	s := patientSettings()
	// Twenty heartbeats in a timeout: a loaded machine that delays a few
	// does not fail the call over.
	s.HeartbeatInterval, s.HeartbeatTimeout = 50*time.Millisecond, time.Second
	e := newTCPEnv(t, s)
	own := e.owners(t, "acct")
	x, c, log := watchedClient(t, e)
	inline := make(chan bool, 1)
	release := make(chan struct{})
	e.ledgers[own[0]].SetHook(blockingHook("acct", inline, release))
	done := goAdd(x, "acct", 7)
	if !testkit.Receive(t, inline, "the handler to start") {
		t.Fatal("the handler ran on a worker, not inline: the test covers nothing")
	}
	// The handler runs until the client has watched the attempt stay on
	// the owner for twice the heartbeat timeout.
	testkit.Until(t, fmt.Sprintf("the handler to run for %v", 2*s.HeartbeatTimeout), func() bool {
		ops := c.InFlight()
		if len(ops) != 1 || ops[0].Attempt > 0 {
			attempts, _ := log.take()
			t.Fatalf("in flight while the handler runs: %+v; attempts %q", ops, attempts)
		}
		return time.Since(ops[0].Started) > 2*s.HeartbeatTimeout
	})
	close(release)
	r := testkit.Receive(t, done, "the call to end")
	attempts, _ := log.take()
	if r.err != nil || r.balance != 7 {
		t.Fatalf("Add = %d, %v; want 7; attempts %q", r.balance, r.err, attempts)
	}
	if want := []string{own[0] + " none"}; !slices.Equal(attempts, want) {
		t.Errorf("attempts %q, want one: %q", attempts, want)
	}
	if n := e.ledgers[own[1]].Executions(); n != 0 {
		t.Errorf("the secondary ran %d times", n)
	}
}

// frameLog is a client's Handler that passes on the acks and results it
// receives.
type frameLog chan frame.Frame

func (l frameLog) HandleFrame(_ transport.Conn, f frame.Frame) {
	switch f := f.(type) {
	case *frame.Ack:
		l <- &frame.Ack{Call: f.Call}
	case *frame.Result:
		l <- &frame.Result{Call: f.Call, Status: f.Status, Message: f.Message}
	}
}

func (frameLog) HandleClose(transport.Conn, error) {}

// The ack of an attempt whose handler runs inline is only queued when it
// arrives; it reaches the client while the handler still runs, though no
// heartbeat is due for a minute, and before the result.
func TestTCPInlineHandlerAckArrivesWhileItRuns(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "acct")
	inline := make(chan bool, 1)
	release := make(chan struct{})
	defer close(release)
	e.ledgers[own[0]].SetHook(blockingHook("acct", inline, release))
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "raw", Group: "clients", Logger: testkit.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, m := range e.members.Members() {
		if m.Name == own[0] {
			addr = m.Addr
		}
	}
	got := make(frameLog, 8)
	conn, err := tp.Dial(t.Context(), addr, got)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	payload, err := codec.Binary.Append(nil, &testledger.AddArgs{Account: "acct", Amount: 3})
	if err != nil {
		t.Fatal(err)
	}
	a := &frame.Attempt{Call: 1, Timeout: 5 * time.Minute, Heartbeat: time.Minute,
		Service: testledger.Desc.Name, Method: testledger.AddMethod.Name, Entities: []string{"acct"},
		Flags: frame.FlagAck, Payload: payload}
	rand.Read(a.OpID[:])
	if err := conn.Send(a); err != nil {
		t.Fatal(err)
	}
	if !testkit.Receive(t, inline, "the handler to start") {
		t.Fatal("the handler ran on a worker, not inline: the test covers nothing")
	}
	f := testkit.Receive(t, got, "the ack")
	if ack, ok := f.(*frame.Ack); !ok || ack.Call != 1 {
		t.Fatalf("first frame while the handler runs: %T %+v, want the ack of call 1", f, f)
	}
	release <- struct{}{}
	f = testkit.Receive(t, got, "the result")
	if r, ok := f.(*frame.Result); !ok || r.Call != 1 || r.Status != frame.StatusOK {
		t.Fatalf("frame after the release: %T %+v, want call 1's result, ok", f, f)
	}
}
