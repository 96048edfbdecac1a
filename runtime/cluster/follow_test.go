package cluster

import (
	"context"
	"errors"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

// source is a MemberSource that a test changes while followers read it.
type source struct {
	mu     sync.Mutex
	all    []MemberStatus
	joined bool
	reads  int // of AllMembers
}

func (s *source) set(joined bool, all ...MemberStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all, s.joined = all, joined
}
func (s *source) AllMembers() []MemberStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return slices.Clone(s.all)
}

func (s *source) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}
func (s *source) Joined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joined
}
func (s *source) Member(string) (MemberStatus, bool) { return MemberStatus{}, false }

func status(name, group string, st State) MemberStatus {
	return MemberStatus{Name: name, Group: group, Address: name + ":9000", Services: []string{"svc"}, State: st}
}

// serve serves the management API of src with token at host:port.
func serve(t *testing.T, src MemberSource, token string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(NewManagement(ManagementConfig{Members: src, Token: token}))
	t.Cleanup(s.Close)
	return s
}

func hostPort(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

func follow(t *testing.T, cfg FollowConfig) *Follower {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	f, err := Follow(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func sameAs(got []runtime.Member, names ...string) bool {
	var have []string
	for _, m := range got {
		have = append(have, m.Name)
	}
	return slices.Equal(have, names)
}

func TestFollowerReadsLiveMembersAndFailsOver(t *testing.T) {
	src := &source{}
	src.set(true, status("a1", "a", StateAlive), status("b1", "b", StateSuspect), status("c1", "c", StateLeaving), status("d1", "d", StateDead))
	servers := map[string]*httptest.Server{}
	for range 3 {
		s := serve(t, src, "tok")
		servers[hostPort(s)] = s
	}
	f := follow(t, FollowConfig{Nodes: slices.Sorted(maps.Keys(servers)), Token: "tok"})

	ctx, cancel := context.WithTimeout(context.Background(), detectBound)
	defer cancel()
	if err := f.Wait(ctx, "svc", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(ctx, "svc", nil); err != nil {
		t.Fatal(err)
	}
	want := []runtime.Member{
		{Name: "a1", Group: "a", Addr: "a1:9000", Services: []string{"svc"}},
		{Name: "b1", Group: "b", Addr: "b1:9000", Services: []string{"svc"}},
	}
	if got := f.Members(); !sameMembers(got, want) {
		t.Errorf("Members() = %+v, want the alive and suspect ones %+v", got, want)
	}

	views := make(chan []runtime.Member, 64)
	cancelSub := f.Subscribe(func(ms []runtime.Member) { views <- ms })
	defer cancelSub()
	<-views // the current view, given before Subscribe returned

	// The node it reads from goes away, twice: it reads from another one
	// and follows the changes there.
	for round, names := range [][]string{{"a1", "b1", "b2"}, {"a1", "b2"}} {
		gone := f.Source()
		servers[gone].Close()
		var all []MemberStatus
		for _, n := range names {
			all = append(all, status(n, n[:1], StateAlive))
		}
		src.set(true, all...)
		select {
		case ms := <-views:
			if !sameAs(ms, names...) {
				t.Errorf("round %d: view %v, want %v", round, ms, names)
			}
		case <-time.After(detectBound):
			t.Fatalf("round %d: no new view; source %s, err %v", round, f.Source(), f.Err())
		}
		if s := f.Source(); s == gone || s == "" {
			t.Errorf("round %d: still reading from %q, which is gone", round, s)
		}
	}

	// Every node gone: the last view stays, and Err says why.
	servers[f.Source()].Close()
	testkit.Until(t, "an error once no node answers", func() bool { return f.Err() != nil })
	if !sameAs(f.Members(), "a1", "b2") {
		t.Errorf("Members() = %v after every node went away, want the last view kept", f.Members())
	}
}

// A node that was catching up when the follower first read it, and then
// caught up, is in the next view its subscribers get: a router that
// left it out while it caught up takes it back. A view that ignored the
// flag kept it out for good, and its group's every call went to the
// other node.
func TestFollowerSeesANodeCatchUp(t *testing.T) {
	src := &source{}
	behind := status("a2", "a", StateAlive)
	behind.CatchingUp = true
	src.set(true, status("a1", "a", StateAlive), behind)
	f := follow(t, FollowConfig{Nodes: []string{hostPort(serve(t, src, ""))}})
	ctx, cancel := context.WithTimeout(context.Background(), detectBound)
	defer cancel()
	if err := f.Wait(ctx, "svc", []string{"a"}); err != nil {
		t.Fatal(err)
	}
	views := make(chan []runtime.Member, 64)
	cancelSub := f.Subscribe(func(ms []runtime.Member) { views <- ms })
	defer cancelSub()
	if ms := <-views; len(ms) != 2 || !ms[1].CatchingUp {
		t.Fatalf("first view %+v, want a2 catching up", ms)
	}
	src.set(true, status("a1", "a", StateAlive), status("a2", "a", StateAlive))
	select {
	case ms := <-views:
		if len(ms) != 2 || ms[1].CatchingUp {
			t.Errorf("view %+v after a2 caught up, want it serving", ms)
		}
	case <-time.After(detectBound):
		t.Fatalf("no new view within %v after a2 caught up: Members() = %+v", detectBound, f.Members())
	}
}

func TestFollowerSkipsNodesThatCannotSpeakForTheCluster(t *testing.T) {
	lonely := &source{}
	lonely.set(false, status("x1", "a", StateAlive)) // restarted, not joined yet
	good := &source{}
	good.set(true, status("a1", "a", StateAlive), status("b1", "b", StateAlive))
	f := follow(t, FollowConfig{Nodes: []string{hostPort(serve(t, lonely, "")), hostPort(serve(t, good, ""))}})
	ctx, cancel := context.WithTimeout(context.Background(), detectBound)
	defer cancel()
	if err := f.Wait(ctx, "svc", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if !sameAs(f.Members(), "a1", "b1") {
		t.Errorf("Members() = %v, want the joined node's view", f.Members())
	}

	// A wrong token is named in the error.
	w := follow(t, FollowConfig{Nodes: []string{hostPort(serve(t, good, "right"))}, Token: "wrong"})
	testkit.Until(t, "an error", func() bool { return w.Err() != nil })
	if err := w.Err(); !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "bearer token") {
		t.Errorf("Err() = %v, want 401 and the reason", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := w.Wait(short, "svc", []string{"a"}); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "[a]") {
		t.Errorf("Wait = %v, want the deadline with the missing group", err)
	}
	if err := w.Wait(short, "svc", nil); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "[any]") {
		t.Errorf("Wait without groups = %v, want the deadline: no member at all", err)
	}
	if _, err := Follow(FollowConfig{}); err == nil {
		t.Error("Follow without nodes: no error")
	}
}

// Nodes named by SRV records: the follower finds them, and when every node
// it knows is gone it asks DNS again and finds the new ones.
func TestFollowerFindsNodesThroughDNS(t *testing.T) {
	d := startDNS(t)
	src := &source{}
	src.set(true, status("a1", "a", StateAlive), status("b1", "b", StateAlive))
	old := serve(t, src, "")
	const name = "_mgmt._tcp.bank.test."
	d.setSRV(name, "old.bank.test:"+old.URL[strings.LastIndex(old.URL, ":")+1:])
	f := follow(t, FollowConfig{Nodes: []string{"dnssrv+" + name}, Resolver: d.Resolver, ResolveEvery: time.Hour})
	testkit.Until(t, "the view through DNS", func() bool { return len(f.Members()) == 2 })

	src2 := &source{}
	src2.set(true, status("a2", "a", StateAlive), status("b1", "b", StateAlive))
	fresh := serve(t, src2, "")
	d.setSRV(name, "new.bank.test:"+fresh.URL[strings.LastIndex(fresh.URL, ":")+1:])
	old.Close()
	testkit.Until(t, "the view of the node DNS names now", func() bool { return sameAs(f.Members(), "a2", "b1") })
	if f.Source() != hostPort(fresh) {
		t.Errorf("Source() = %s, want %s", f.Source(), hostPort(fresh))
	}
}

// A follower given a node's RPC port instead of its management address is
// told so, from the first bytes the port sends, and Wait returns that at
// once instead of waiting for members that cannot come.
func TestFollowerGivenAnRPCPortSaysSo(t *testing.T) {
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "n1", Group: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := runtime.NewServer(runtime.ServerConfig{})
	ln, err := srv.Serve(tcp, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	f := follow(t, FollowConfig{Nodes: []string{ln.Addr()}, Interval: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = f.Wait(ctx, "svc", nil)
	if !errors.Is(err, ErrNotManagement) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v; want ErrNotManagement at once", err)
	}
	for _, want := range []string{ln.Addr(), "RPC port", "management address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}

// A thin client reports the failovers of its clients on its reads of the
// membership, and the node it reads from exports them, by client, beside
// its own clients' (client "local").
func TestFollowerReportsFailovers(t *testing.T) {
	src := &source{}
	src.set(true, status("a1", "a", StateAlive))
	mgmt := NewManagement(ManagementConfig{Members: src})
	srv := httptest.NewServer(mgmt)
	t.Cleanup(srv.Close)
	f := follow(t, FollowConfig{Nodes: []string{hostPort(srv)}, Interval: 10 * time.Millisecond, Name: "loadgen 1"})
	for range 3 {
		f.ReportFailover("bank.Accounts", "Deposit", runtime.ReasonHeartbeatTimeout)
	}
	f.ReportFailover("bank.Accounts", "Balance", runtime.ReasonConnBroken)
	want := []string{
		`ffgen_client_failovers_reported_total{client="loadgen 1",method="Deposit",reason="heartbeat-timeout",service="bank.Accounts"} 3`,
		`ffgen_client_failovers_reported_total{client="loadgen 1",method="Balance",reason="conn-broken",service="bank.Accounts"} 1`,
	}
	testkit.Until(t, "the reported failovers in /metrics", func() bool {
		rec := httptest.NewRecorder()
		mgmt.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, w := range want {
			if !strings.Contains(rec.Body.String(), w) {
				return false
			}
		}
		return true
	})
}

func TestFailoversHeaderRoundTrip(t *testing.T) {
	var c failoverCounts
	c.add("s, 1", "m/x", runtime.ReasonAttemptTimeout)
	c.add("s, 1", "m/x", runtime.ReasonAttemptTimeout)
	name, got, err := parseFailovers(c.header("host:1 a"))
	if err != nil || name != "host:1 a" || len(got) != 1 || got[failoverKey{"s, 1", "m/x", runtime.ReasonAttemptTimeout.String()}] != 2 {
		t.Fatalf("parse(header) = %q %v %v", name, got, err)
	}
	for _, bad := range []string{"", "name", "name s/m=1", "name s/m/r=x", "%zz s/m/r=1"} {
		if _, _, err := parseFailovers(bad); err == nil {
			t.Errorf("parseFailovers(%q) accepted", bad)
		}
	}
}

// A node that restarted between two reads stays in the view; its JoinedAt
// says it joined again, and a client forgets its suspicion of it
// (runtime.Member.JoinedAt). Each node saw the others join at its own
// moment: moving to another node to read from is not taken for every
// member joining again, and a join that node sees later still is.
func TestFollowerSeesANodeJoinAgain(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	at := func(name, group string, joined time.Time) MemberStatus {
		s := status(name, group, StateAlive)
		s.JoinedAt = joined
		return s
	}
	first, second := &source{}, &source{}
	first.set(true, at("a1", "a", t0), at("b1", "b", t0))
	// The second node has not joined yet: the follower reads the first.
	second.set(false, at("a1", "a", t0.Add(5*time.Second)), at("b1", "b", t0.Add(7*time.Second)))
	firstSrv := serve(t, first, "")
	f := follow(t, FollowConfig{Nodes: []string{hostPort(firstSrv), hostPort(serve(t, second, ""))}})
	ctx, cancel := context.WithTimeout(context.Background(), detectBound)
	defer cancel()
	if err := f.Wait(ctx, "svc", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	views := make(chan []runtime.Member, 64)
	cancelSub := f.Subscribe(func(ms []runtime.Member) { views <- ms })
	defer cancelSub()
	next := func(what string) []runtime.Member {
		t.Helper()
		select {
		case ms := <-views:
			return ms
		case <-time.After(detectBound):
			t.Fatalf("no view within %v after %s: Members() = %+v", detectBound, what, f.Members())
			return nil
		}
	}
	joined := func(ms []runtime.Member) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, m.JoinedAt)
		}
		return out
	}
	if got := joined(next("subscribing")); !slices.Equal(got, []time.Time{t0, t0}) {
		t.Fatalf("first view joined at %v, want both at %v", got, t0)
	}
	restart := t0.Add(time.Minute)
	first.set(true, at("a1", "a", restart), at("b1", "b", t0))
	if got := joined(next("a1 restarted")); !slices.Equal(got, []time.Time{restart, t0}) {
		t.Fatalf("view joined at %v after a1 restarted, want a1 at %v", got, restart)
	}
	second.set(true, at("a1", "a", t0.Add(5*time.Second)), at("b1", "b", t0.Add(7*time.Second)))
	firstSrv.Close() // the follower moves to the second node
	read := second.readCount()
	testkit.Until(t, "two reads from the second node", func() bool { return second.readCount() >= read+2 })
	select {
	case ms := <-views:
		t.Fatalf("a new view %+v on moving to the second node: the move is not a join", ms)
	default:
	}
	again := t0.Add(2 * time.Minute)
	second.set(true, at("a1", "a", again), at("b1", "b", t0.Add(7*time.Second)))
	for {
		ms := next("a1 joined again, seen by the second node")
		if got := joined(ms); got[0].Equal(again) {
			if !got[1].Equal(t0) {
				t.Errorf("b1 joined at %v once read from the second node, want %v kept: the move is not a join", got[1], t0)
			}
			return
		}
		t.Fatalf("view %+v before a1 joined again", ms)
	}
}

// A client that a node refused asks its thin client's view to be read
// again (Refresh): the read comes at once rather than at the next
// Interval, and a storm of requests makes one read every refreshGap at
// most.
func TestFollowerRefreshReadsAgain(t *testing.T) {
	src := &source{}
	src.set(true, status("a1", "a", StateAlive))
	srv := serve(t, src, "")
	f := follow(t, FollowConfig{Nodes: []string{hostPort(srv)}, Interval: time.Hour})
	testkit.Until(t, "the first read", func() bool { return sameAs(f.Members(), "a1") })

	src.set(true, status("a1", "a", StateAlive), status("b1", "b", StateAlive))
	f.Refresh()
	testkit.Until(t, "the read Refresh asked for", func() bool { return sameAs(f.Members(), "a1", "b1") })

	before, start := src.readCount(), time.Now()
	for time.Since(start) < 5*refreshGap {
		f.Refresh()
		time.Sleep(time.Millisecond)
	}
	testkit.Until(t, "a read Refresh asked for", func() bool { return src.readCount() > before })
	// One read a gap, and one more that the last request left pending.
	reads, most := src.readCount()-before, int(time.Since(start)/refreshGap)+2
	if reads > most {
		t.Errorf("Refresh called without pause for %v: %d reads, want %d at most", time.Since(start), reads, most)
	}
}
