package runtime_test

// The essential scenarios again over real TCP on loopback. Real clocks: the
// assertions are on outcomes, with only generous time bounds.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

type tcpEnv struct {
	members *runtime.StaticMembership
	ledgers map[string]*testledger.Mem
	servers map[string]*runtime.Server
	// transports are the nodes' transports, for their counters.
	transports map[string]*transport.TCP
	client     *runtime.Client
	ledger     *testledger.Client
	s          runtime.Settings
}

// newTCPEnv starts one node per group and a client; edit, if given,
// adjusts every transport's configuration.
func newTCPEnv(tb testing.TB, s runtime.Settings, edit ...func(*transport.TCPConfig)) *tcpEnv {
	tb.Helper()
	if len(s.Groups) == 0 {
		s.Groups = []string{"a", "b"}
	}
	e := &tcpEnv{
		members: runtime.NewStaticMembership(),
		ledgers: map[string]*testledger.Mem{},
		servers: map[string]*runtime.Server{},
		s:       s,

		transports: map[string]*transport.TCP{},
	}
	var ms []runtime.Member
	for _, g := range s.Groups {
		name := g + "1"
		cfg := transport.TCPConfig{Config: transport.Config{Node: name, Group: g, Logger: testkit.Logger(tb)}}
		for _, f := range edit {
			f(&cfg)
		}
		tp, err := transport.NewTCP(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		srv := runtime.NewServer(runtime.ServerConfig{Settings: s, Logger: testkit.Logger(tb)})
		l := testledger.NewMem(name)
		if err := srv.Register(testledger.PlainDesc, l); err != nil {
			tb.Fatal(err)
		}
		ln, err := srv.Serve(tp, "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		e.ledgers[name], e.servers[name], e.transports[name] = l, srv, tp
		ms = append(ms, runtime.Member{Name: name, Group: g, Addr: ln.Addr(), Services: []string{testledger.Desc.Name}})
	}
	e.members.Set(ms)
	ccfg := transport.TCPConfig{Config: transport.Config{Node: "client", Group: "clients", Logger: testkit.Logger(tb)}}
	for _, f := range edit {
		f(&ccfg)
	}
	ctp, err := transport.NewTCP(ccfg)
	if err != nil {
		tb.Fatal(err)
	}
	e.client, err = runtime.NewClient(runtime.ClientConfig{Transport: ctp, Membership: e.members, Settings: s, Logger: testkit.Logger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	e.ledger = testledger.NewClient(e.client)
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
	var out []string
	for _, m := range runtime.Route(e.s.Groups, e.members.Members(), testledger.Desc.Name, entity) {
		out = append(out, m.Name)
	}
	if len(out) != len(e.s.Groups) {
		tb.Fatalf("owners of %q = %v, want one in each of %d groups", entity, out, len(e.s.Groups))
	}
	return out
}

// memberAddr is node's address as the membership lists it.
func (e *tcpEnv) memberAddr(node string) string {
	for _, m := range e.members.Members() {
		if m.Name == node {
			return m.Addr
		}
	}
	return ""
}

// setAddr lists node at addr, as if it had moved there.
func (e *tcpEnv) setAddr(node, addr string) {
	ms := e.members.Members()
	for i := range ms {
		if ms[i].Name == node {
			ms[i].Addr = addr
		}
	}
	e.members.Set(ms)
}

func testSettings() runtime.Settings {
	s := runtime.DefaultSettings()
	s.Groups = []string{"a", "b"}
	return s
}

// patientSettings are for tests that assert no failover happens, or which
// one: on a loaded machine the default 200 ms heartbeat timeout, which also
// bounds a dial, may pass for reasons the test is not about.
func patientSettings() runtime.Settings {
	s := testSettings()
	s.HeartbeatTimeout, s.AttemptTimeout, s.OperationTimeout = 5*time.Second, 10*time.Second, 20*time.Second
	return s
}

func TestTCPCallsAndDeclaredErrors(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	if got, err := e.ledger.Add(t.Context(), "acct", 5); err != nil || got != 5 {
		t.Fatalf("Add = %d, %v", got, err)
	}
	if _, err := e.ledger.Transfer(t.Context(), "acct", "other", 50); !errors.As(err, new(*testledger.LimitError)) {
		t.Fatalf("Transfer over the limit: %v, want *LimitError", err)
	}
	own := e.owners(t, "acct")
	e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
	if got, err := e.ledger.Add(t.Context(), "acct", 1); err != nil || got != 1 {
		t.Fatalf("Add after ErrBusy = %d, %v; want the secondary's fresh balance 1", got, err)
	}
	for _, l := range e.ledgers {
		l.SetHook(func(context.Context, string, int64) error { return testledger.ErrRejected })
	}
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != testledger.ErrRejected {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
}

func TestTCPKilledPrimaryFailsOver(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "acct")
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
		t.Fatal(err)
	}
	// The primary dies mid-operation: its connections drop.
	e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
		go e.servers[own[0]].Close()
		<-ctx.Done()
		return ctx.Err()
	})
	start := time.Now()
	got, err := e.ledger.Add(t.Context(), "acct", 2)
	if err != nil || got != 2 {
		t.Fatalf("Add = %d, %v; want 2 from %s", got, err, own[1])
	}
	if took := time.Since(start); took >= e.s.HeartbeatTimeout {
		t.Errorf("failover after a broken connection took %v, as long as the heartbeat timeout %v", took, e.s.HeartbeatTimeout)
	}
}

// A node that accepts connections and completes the handshake but then
// never answers, like a frozen process. The heartbeat timeout is 1 s
// rather than 200 ms: it also bounds the dial to the next node, which a
// loaded machine can make slower than 200 ms.
func TestTCPFrozenNodeFailsOverOnHeartbeatTimeout(t *testing.T) {
	s := patientSettings()
	s.HeartbeatTimeout = time.Second
	e := newTCPEnv(t, s)
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
			hello, _ := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: own[0], Group: "a"}, 0)
			c.Write(hello)
			go io.Copy(io.Discard, c) // reads everything, answers nothing
		}
	}()
	e.setAddr(own[0], frozen.Addr().String())
	start := time.Now()
	got, err := e.ledger.Add(t.Context(), "acct", 3)
	if err != nil || got != 3 {
		t.Fatalf("Add = %d, %v", got, err)
	}
	if took := time.Since(start); took < e.s.HeartbeatTimeout || took >= e.s.AttemptTimeout {
		t.Errorf("failover took %v; want the heartbeat timeout %v, not the attempt timeout %v", took, e.s.HeartbeatTimeout, e.s.AttemptTimeout)
	}
	if !e.client.Suspected(own[0]) {
		t.Errorf("frozen node not suspected")
	}
}

// A handler that outlives the heartbeat timeout over real sockets is kept
// alive by its heartbeats. The handler runs until the client has watched
// the operation stay on its first node for twice the heartbeat timeout;
// twenty heartbeats fit in one timeout, so a loaded machine that delays a
// few does not fail it over.
func TestTCPLongOperationDoesNotFailOver(t *testing.T) {
	s := patientSettings()
	s.HeartbeatInterval, s.HeartbeatTimeout = 50*time.Millisecond, time.Second
	e := newTCPEnv(t, s)
	own := e.owners(t, "acct")
	release := make(chan struct{})
	e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	done := make(chan error, 1)
	go func() { _, err := e.ledger.Add(t.Context(), "acct", 1); done <- err }()
	testkit.Until(t, fmt.Sprintf("the operation to run on %s for %v", own[0], 2*s.HeartbeatTimeout), func() bool {
		ops := e.client.InFlight()
		if len(ops) == 1 && ops[0].Attempt > 0 {
			t.Fatalf("failed over to %s while %s heartbeated", ops[0].Node, own[0])
		}
		return len(ops) == 1 && ops[0].Node == own[0] && ops[0].Attempt == 0 && time.Since(ops[0].Started) > 2*s.HeartbeatTimeout
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.ledgers[own[1]].Executions(); n != 0 {
		t.Errorf("secondary ran %d times: a heartbeating node was failed over", n)
	}
}

// A payload over the frame limit can never be delivered: it fails at once,
// not delivered, without a failover, and the connection keeps serving
// other calls.
func TestTCPOversizedPayloadFailsWithoutFailover(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
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
	// A scatter write too large for a frame reaches no node: it fails the
	// same way, and no replica falls behind for it.
	_, err = e.ledger.Transfer(t.Context(), huge, "acct", 1)
	if !errors.As(err, &re) || re.Reason != runtime.ReasonTooLarge || re.Delivery != runtime.NotDelivered {
		t.Fatalf("scatter with a 4 MiB entity: %v, want too-large, not delivered", err)
	}
	for name, srv := range e.servers {
		if err := srv.Ready(); err != nil {
			t.Errorf("%s fell behind for a write nobody got: %v", name, err)
		}
	}
	before := e.ledgers[own[0]].Executions()
	if got, err := e.ledger.Add(t.Context(), "acct", 1); err != nil || got != 2 {
		t.Fatalf("Add after the oversized one = %d, %v; want 2", got, err)
	}
	if after := e.ledgers[own[0]].Executions(); after != before+1 {
		t.Errorf("primary %s ran %d more times, want 1: the connection should have stayed up", own[0], after-before)
	}
}

// Hostile connections to a node, one of each kind, stay their own
// problem: the honest client's calls all run on the primary, none fails
// over, and the node stays unsuspected.
func TestTCPHostileConnectionsDoNotDisturbCalls(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "acct")
	addr := e.memberAddr(own[0])
	hello, _ := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "hostile", Group: "x"}, 0)
	stalled := append(append([]byte(nil), hello...), 0, 0x40, 0, 0, frame.Version, byte(frame.TypeAttempt))
	for _, b := range [][]byte{nil, stalled, []byte("\x00\x00\x00\x05\x09junk"), append(append([]byte(nil), hello...), 0xff, 0xff, 0xff, 0xff)} {
		for range 10 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(b)
		}
	}
	for i := range 50 {
		if got, err := e.ledger.Add(t.Context(), "acct", 1); err != nil || got != int64(i+1) {
			t.Fatalf("Add %d = %d, %v", i, got, err)
		}
	}
	if n := e.ledgers[own[0]].Executions(); n != 50 {
		t.Errorf("primary %s ran %d of 50 calls", own[0], n)
	}
	if n := e.ledgers[own[1]].Executions(); n != 0 {
		t.Errorf("secondary %s ran %d calls: something failed over", own[1], n)
	}
	if e.client.Suspected(own[0]) {
		t.Errorf("primary %s suspected", own[0])
	}
}

// Nodes that will not talk to the client as configured fail its calls
// with reasons that say why, not as refused connections: TLS on the nodes
// and none on the client, or another protocol version.
func TestTCPMismatchedNodesNameTheCause(t *testing.T) {
	cert := testkit.SelfSigned(t) // nobody trusts it
	tlsNode, err := transport.NewTCP(transport.TCPConfig{
		Config: transport.Config{Node: "tls", Group: "a", Logger: testkit.Logger(t)},
		TLS:    &tls.Config{Certificates: []tls.Certificate{cert}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := runtime.NewServer(runtime.ServerConfig{Settings: patientSettings(), Logger: testkit.Logger(t)})
	if err := srv.Register(testledger.Desc, testledger.NewMem("tls")); err != nil {
		t.Fatal(err)
	}
	tl, err := srv.Serve(tlsNode, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	old, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	go func() {
		for {
			c, err := old.Accept()
			if err != nil {
				return
			}
			hello, _ := frame.Append(nil, &frame.Hello{Version: 0, Node: "old", Group: "a"}, 0)
			c.Write(hello)
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()

	for _, tt := range []struct {
		addr   string
		reason runtime.Reason
		is     error
	}{
		{tl.Addr(), runtime.ReasonTLS, transport.ErrTLS},
		{old.Addr().String(), runtime.ReasonProtocol, transport.ErrBadVersion},
	} {
		// Patient: a TLS handshake slower than a 200 ms dial bound, on a
		// loaded machine, would end as a dial failure, not as the cause.
		e := newTCPEnv(t, patientSettings())
		ms := e.members.Members()
		for i := range ms {
			ms[i].Addr = tt.addr
		}
		e.members.Set(ms)
		_, err := e.ledger.Add(t.Context(), "acct", 1)
		var re *runtime.Error
		if !errors.As(err, &re) || re.Reason != tt.reason || !errors.Is(err, tt.is) || errors.Is(err, transport.ErrRefused) {
			t.Errorf("Add against %s: %v; want reason %s wrapping %v, not ErrRefused", tt.addr, err, tt.reason, tt.is)
			continue
		}
		for _, h := range re.History {
			if h.Reason != tt.reason {
				t.Errorf("attempt #%d on %s ended %s, want %s", h.Number, h.Node, h.Reason, tt.reason)
			}
		}
	}
}

type bigArgs struct{ N int64 }

func (a *bigArgs) AppendFF(b []byte) []byte { return codec.AppendVarint(b, a.N) }

func (a *bigArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.N = r.Varint()
	return r.Done()
}

type bigResult struct{ B []byte }

func (x *bigResult) AppendFF(b []byte) []byte { return codec.AppendBytes(b, x.B) }

func (x *bigResult) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	x.B = r.Bytes()
	return r.Done()
}

// A result too large for a frame cannot reach the caller from any node: it
// is answered as a failure that says so, at once, instead of leaving the
// caller to time out and fail over.
func TestTCPOversizedResultIsAnswered(t *testing.T) {
	get := &runtime.MethodDesc{
		Service: "test.Big", Name: "Get",
		Entities: func(codec.Message, []string) []string { return []string{"e"} },
		NewArgs:  func() codec.Message { return new(bigArgs) },
		Handle: func(_ context.Context, _ any, args codec.Message) (codec.Message, error) {
			return &bigResult{B: make([]byte, args.(*bigArgs).N)}, nil
		},
	}
	desc := &runtime.ServiceDesc{Name: "test.Big", Methods: []*runtime.MethodDesc{get}}
	e := newTCPEnv(t, patientSettings())
	for _, srv := range e.servers {
		if err := srv.Register(desc, struct{}{}); err != nil {
			t.Fatal(err)
		}
	}
	ms := e.members.Members()
	for i := range ms {
		ms[i].Services = append(ms[i].Services, desc.Name)
	}
	e.members.Set(ms)

	var res bigResult
	if err := e.client.Invoke(t.Context(), get, &bigArgs{N: 1000}, &res); err != nil || len(res.B) != 1000 {
		t.Fatalf("small result: %d bytes, %v", len(res.B), err)
	}
	err := e.client.Invoke(t.Context(), get, &bigArgs{N: transport.DefaultMaxFrameSize}, &res)
	var re *runtime.Error
	var remote *runtime.RemoteError
	if !errors.As(err, &re) || !errors.As(err, &remote) || !strings.Contains(remote.Message, "does not fit in a frame") {
		t.Fatalf("oversized result: %v, want a *runtime.RemoteError saying it does not fit", err)
	}
	if len(re.History) != 1 || re.Delivery != runtime.Acknowledged {
		t.Errorf("oversized result: %d attempts, %s; want 1, acknowledged", len(re.History), re.Delivery)
	}
}

// A pooled connection with nothing to do closes itself after the idle
// timeout; the next call dials a fresh one and runs where it should,
// without failing over.
func TestTCPIdleConnectionIsRedialed(t *testing.T) {
	e := newTCPEnv(t, patientSettings(), func(c *transport.TCPConfig) { c.IdleTimeout = 2 * time.Second })
	own := e.owners(t, "acct")
	node := e.transports[own[0]]
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
		t.Fatal(err)
	}
	// The client's side, at half the timeout, closes first.
	testkit.Until(t, "the idle connection to "+own[0]+" to close", func() bool { return node.NodeStats().Conns == 0 })
	if n := node.NodeStats().IdleClosed; n != 0 {
		t.Errorf("the node closed %d idle connections itself; the client should have, first", n)
	}
	if got, err := e.ledger.Add(t.Context(), "acct", 1); err != nil || got != 2 {
		t.Fatalf("Add after the idle close = %d, %v; want 2 from %s", got, err, own[0])
	}
	if n := e.ledgers[own[1]].Executions(); n != 0 {
		t.Errorf("secondary ran %d calls", n)
	}
}

// A client given a node's management (HTTP) address as its RPC address is
// refused at its first call with an error that names the address and
// says what it is, read from the HTTP answer the management port sends at
// once, instead of failing after the dial timeout; nothing ran.
func TestTCPManagementAddressIsNotAnRPCAddress(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	mgmt, err := cluster.ServeManagement("127.0.0.1:0", cluster.ManagementConfig{Members: noMembers{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgmt.Shutdown(context.Background()) })
	addr := mgmt.Addr().String()
	ms := e.members.Members()
	for i := range ms {
		ms[i].Addr = addr
	}
	e.members.Set(ms)
	_, err = e.ledger.Add(t.Context(), "acct", 1)
	if !errors.Is(err, transport.ErrNotRPC) || !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("a call to a management address: %v; want transport.ErrNotRPC", err)
	}
	if runtime.MaybeExecuted(err) {
		t.Errorf("MaybeExecuted is true for a call no node received: %v", err)
	}
	for _, want := range []string{addr, "HTTP", "management address", "RPC address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

// noMembers is a management MemberSource with nobody in it.
type noMembers struct{}

func (noMembers) AllMembers() []cluster.MemberStatus         { return nil }
func (noMembers) Member(string) (cluster.MemberStatus, bool) { return cluster.MemberStatus{}, false }
func (noMembers) Joined() bool                               { return true }

// A node's management endpoint exports what its server served, counted by
// the server itself, whether or not it was given a cluster.Stats: the
// cluster page reads these. With a Stats as well, the families are
// exported once, from the server's counts; with several servers, once per
// method, summed.
func TestTCPServedCountsWithoutStats(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	own := e.owners(t, "acct")
	for range 5 {
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
	}
	e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return testledger.ErrRejected })
	if _, err := e.ledger.Add(t.Context(), "acct", 1); err != testledger.ErrRejected {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	srv := e.servers[own[0]]
	var all []runtime.InFlighter // the servers of one process: one series per method, summed
	for _, s := range e.servers {
		all = append(all, s)
	}
	for i, stats := range []*cluster.Stats{nil, cluster.NewStats(), nil} {
		cfg := cluster.ManagementConfig{Members: noMembers{}, Ops: []runtime.InFlighter{srv}, Replicas: srv}
		if stats != nil {
			cfg.Metrics = stats
		}
		if i == 2 {
			cfg.Ops = all
		}
		rec := httptest.NewRecorder()
		cluster.NewManagement(cfg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			t.Fatalf("with Stats %v: /metrics answered %d: %s", stats != nil, rec.Code, rec.Body)
		}
		body := rec.Body.String()
		for _, want := range []string{
			`ffgen_server_handled_total{code="",method="Add",service="test.Ledger",status="ok"} 5`,
			`ffgen_server_handled_total{code="ErrRejected",method="Add",service="test.Ledger",status="fail"} 1`,
			`ffgen_server_handler_duration_seconds_count{method="Add",service="test.Ledger"} 6`,
			`ffgen_server_attempts_in_flight{method="Add",service="test.Ledger"} 0`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("with Stats %v: /metrics lacks %s", stats != nil, want)
			}
		}
	}
}
