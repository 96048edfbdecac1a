package runtime_test

// The essential scenarios again over real TCP on loopback. Real clocks: the
// assertions are on outcomes, with only generous time bounds.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

type tcpEnv struct {
	members *runtime.StaticMembership
	ledgers map[string]*memLedger
	servers map[string]*runtime.Server
	client  *runtime.Client
	ledger  *ledgerClient
	s       runtime.Settings
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTCPEnv(tb testing.TB, s runtime.Settings) *tcpEnv {
	tb.Helper()
	if len(s.Groups) == 0 {
		s.Groups = []string{"a", "b"}
	}
	e := &tcpEnv{
		members: runtime.NewStaticMembership(),
		ledgers: map[string]*memLedger{},
		servers: map[string]*runtime.Server{},
		s:       s,
	}
	var ms []runtime.Member
	for _, g := range s.Groups {
		name := g + "1"
		tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: g, Logger: quietLogger()}})
		if err != nil {
			tb.Fatal(err)
		}
		srv := runtime.NewServer(runtime.ServerConfig{Settings: s, Logger: quietLogger()})
		l := newMemLedger(name)
		if err := srv.Register(ledgerDesc, l); err != nil {
			tb.Fatal(err)
		}
		ln, err := srv.Serve(tp, "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		e.ledgers[name], e.servers[name] = l, srv
		ms = append(ms, runtime.Member{Name: name, Group: g, Addr: ln.Addr(), Services: []string{ledgerDesc.Name}})
	}
	e.members.Set(ms)
	ctp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "client", Group: "clients", Logger: quietLogger()}})
	if err != nil {
		tb.Fatal(err)
	}
	e.client, err = runtime.NewClient(runtime.ClientConfig{Transport: ctp, Membership: e.members, Settings: s, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	e.ledger = newLedgerClient(e.client)
	tb.Cleanup(func() {
		e.client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range e.servers {
			srv.Shutdown(ctx)
		}
	})
	return e
}

func (e *tcpEnv) owners(tb testing.TB, entity string) []string {
	r := e.client.Router()
	var out []string
	for _, g := range r.GroupOrder(entity, nil) {
		m, ok := r.Owner(ledgerDesc.Name, g, entity, nil)
		if !ok {
			tb.Fatalf("no owner in group %d", g)
		}
		out = append(out, m.Name)
	}
	return out
}

func testSettings() runtime.Settings {
	s := runtime.DefaultSettings()
	s.Groups = []string{"a", "b"}
	return s
}

func TestTCPCallsAndDeclaredErrors(t *testing.T) {
	e := newTCPEnv(t, testSettings())
	if got, err := e.ledger.Add(t.Context(), "acct", 5); err != nil || got != 5 {
		t.Fatalf("Add = %d, %v", got, err)
	}
	if _, err := e.ledger.Transfer(t.Context(), "acct", "other", 50); !errors.As(err, new(*LimitError)) {
		t.Fatalf("Transfer over the limit: %v, want *LimitError", err)
	}
	own := e.owners(t, "acct")
	e.ledgers[own[0]].setHook(func(context.Context, string, int64) error { return ErrBusy })
	if got, err := e.ledger.Add(t.Context(), "acct", 1); err != nil || got != 1 {
		t.Fatalf("Add after ErrBusy = %d, %v; want the secondary's fresh balance 1", got, err)
	}
	for _, l := range e.ledgers {
		l.setHook(func(context.Context, string, int64) error { return ErrRejected })
	}
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != ErrRejected {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
}

func TestTCPKilledPrimaryFailsOver(t *testing.T) {
	e := newTCPEnv(t, testSettings())
	own := e.owners(t, "acct")
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
		t.Fatal(err)
	}
	// The primary dies mid-operation: its connections drop.
	e.ledgers[own[0]].setHook(func(ctx context.Context, _ string, _ int64) error {
		go e.servers[own[0]].Close()
		<-ctx.Done()
		return ctx.Err()
	})
	start := time.Now()
	got, err := e.ledger.Add(t.Context(), "acct", 2)
	if err != nil || got != 2 {
		t.Fatalf("Add = %d, %v; want 2 from %s", got, err, own[1])
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("failover after a broken connection took %v", took)
	}
}

// A node that accepts connections and completes the handshake but then
// never answers, like a frozen process.
func TestTCPFrozenNodeFailsOverOnHeartbeatTimeout(t *testing.T) {
	e := newTCPEnv(t, testSettings())
	own := e.owners(t, "acct")
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	go func() {
		for {
			c, err := frozen.Accept()
			if err != nil {
				return
			}
			hello, _ := transport.AppendFrame(nil, &transport.Hello{Version: transport.Version, Node: own[0], Group: "a"}, 0)
			c.Write(hello)
			go io.Copy(io.Discard, c) // reads everything, answers nothing
		}
	}()
	ms := e.members.Members()
	for i := range ms {
		if ms[i].Name == own[0] {
			ms[i].Addr = frozen.Addr().String()
		}
	}
	e.members.Set(ms)
	start := time.Now()
	got, err := e.ledger.Add(t.Context(), "acct", 3)
	if err != nil || got != 3 {
		t.Fatalf("Add = %d, %v", got, err)
	}
	if took := time.Since(start); took < e.s.HeartbeatTimeout || took > 5*time.Second {
		t.Errorf("failover took %v; want about the heartbeat timeout %v", took, e.s.HeartbeatTimeout)
	}
	if !e.client.Suspected(own[0]) {
		t.Errorf("frozen node not suspected")
	}
}

// A handler that outlives the heartbeat timeout over real sockets is kept
// alive by its heartbeats. The handler runs until the client has watched
// the operation stay on its first node for twice the heartbeat timeout; ten
// heartbeats fit in one timeout, so a loaded machine that delays a few does
// not fail it over.
func TestTCPLongOperationDoesNotFailOver(t *testing.T) {
	s := testSettings()
	s.HeartbeatInterval, s.HeartbeatTimeout = 50*time.Millisecond, 500*time.Millisecond
	e := newTCPEnv(t, s)
	own := e.owners(t, "acct")
	release := make(chan struct{})
	e.ledgers[own[0]].setHook(func(ctx context.Context, _ string, _ int64) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	done := make(chan error, 1)
	go func() { _, err := e.ledger.Add(t.Context(), "acct", 1); done <- err }()
	bound := time.Now().Add(time.Minute)
	for {
		ops := e.client.InFlight()
		if len(ops) == 1 && ops[0].Node == own[0] && ops[0].Attempt == 0 && time.Since(ops[0].Started) > 2*s.HeartbeatTimeout {
			break
		}
		if len(ops) == 1 && ops[0].Attempt > 0 {
			t.Fatalf("failed over to %s while %s heartbeated", ops[0].Node, own[0])
		}
		if time.Now().After(bound) {
			t.Fatalf("the operation did not run on %s for %v within a minute: %+v", own[0], 2*s.HeartbeatTimeout, ops)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.ledgers[own[1]].executions(); n != 0 {
		t.Errorf("secondary ran %d times: a heartbeating node was failed over", n)
	}
}

// A payload over the frame limit can never be delivered: it fails at once,
// not delivered, without a failover, and the connection keeps serving
// other calls.
func TestTCPOversizedPayloadFailsWithoutFailover(t *testing.T) {
	e := newTCPEnv(t, testSettings())
	own := e.owners(t, "acct")
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("x", transport.DefaultMaxFrameSize)
	_, err := e.ledger.Add(t.Context(), huge, 1)
	var re *runtime.Error
	if !errors.As(err, &re) || !errors.Is(err, transport.ErrFrameTooLarge) {
		t.Fatalf("Add with a 4 MiB entity: %v, want a *runtime.Error wrapping ErrFrameTooLarge", err)
	}
	if re.Reason != runtime.ReasonTooLarge || re.Delivery != runtime.NotDelivered || len(re.History) != 1 || runtime.MaybeExecuted(err) {
		t.Errorf("got reason %s, %s, %d attempt(s); want too-large, not delivered, 1 attempt: %v", re.Reason, re.Delivery, len(re.History), err)
	}
	if !strings.Contains(err.Error(), "too-large") || !strings.Contains(err.Error(), "limit") {
		t.Errorf("error text does not name the cause: %v", err)
	}
	if e.client.Suspected(re.History[0].Node) {
		t.Errorf("%s is suspected after an oversized payload that was never sent", re.History[0].Node)
	}
	before := e.ledgers[own[0]].executions()
	if got, err := e.ledger.Add(t.Context(), "acct", 1); err != nil || got != 2 {
		t.Fatalf("Add after the oversized one = %d, %v; want 2", got, err)
	}
	if after := e.ledgers[own[0]].executions(); after != before+1 {
		t.Errorf("primary %s ran %d more times, want 1: the connection should have stayed up", own[0], after-before)
	}
}
