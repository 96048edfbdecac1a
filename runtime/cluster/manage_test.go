package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
)

type fakeMembers struct {
	all    []MemberStatus
	joined bool
}

func (f *fakeMembers) AllMembers() []MemberStatus { return f.all }
func (f *fakeMembers) Joined() bool               { return f.joined }
func (f *fakeMembers) Member(name string) (MemberStatus, bool) {
	for _, m := range f.all {
		if m.Name == name {
			return m, true
		}
	}
	return MemberStatus{}, false
}

type fakeOperator struct{ calls []string }

func (f *fakeOperator) Operate(name string, op Operation) error {
	f.calls = append(f.calls, name+":"+string(op))
	switch name {
	case "local":
		return nil
	case "remote":
		return fmt.Errorf("%w: remote", ErrNotLocal)
	}
	return fmt.Errorf("%w %q", ErrUnknownMember, name)
}

type fakeMetrics struct{ err error }

var descX = prometheus.NewDesc("ffgen_x_total", "A test counter.", nil, nil)

func (fakeMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- descX }

func (f fakeMetrics) Collect(ch chan<- prometheus.Metric) {
	if f.err != nil {
		ch <- prometheus.NewInvalidMetric(descX, f.err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descX, prometheus.CounterValue, 1)
}

type fakeOps []runtime.OpInfo

func (f fakeOps) InFlight() []runtime.OpInfo { return f }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testMembers() *fakeMembers {
	return &fakeMembers{joined: true, all: []MemberStatus{
		{Name: "local", Group: "g0", Address: "10.0.0.1:9000", GossipAddress: "10.0.0.1:7946", Services: []string{"bank.Accounts"}, State: StateAlive, Since: t0, Local: true},
		{Name: "remote", Group: "g1", Address: "10.0.0.2:9000", GossipAddress: "10.0.0.2:7946", Services: []string{"bank.Accounts"}, State: StateSuspect, Since: t0},
		{Name: "gone", Group: "g2", Address: "10.0.0.3:9000", State: StateDead, Since: t0},
	}}
}

type call struct {
	method, path, body, token string
	status                    int
	contains                  string
}

func do(t *testing.T, h http.Handler, c call) string {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req := httptest.NewRequest(c.method, c.path, body)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	got := rec.Body.String()
	if rec.Code != c.status {
		t.Errorf("%s %s: status %d, want %d; body %s", c.method, c.path, rec.Code, c.status, got)
	}
	if !strings.Contains(got, c.contains) {
		t.Errorf("%s %s: body %q does not contain %q", c.method, c.path, got, c.contains)
	}
	if rec.Code >= 400 {
		var e struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Errorf("%s %s: error body is not {\"error\":...}: %q", c.method, c.path, got)
		}
	}
	return got
}

func TestManagementReadRoutes(t *testing.T) {
	ops := fakeOps{
		{Side: "server", OpID: "b", Service: "s", Method: "M", Started: t0.Add(time.Second)},
		{Side: "client", OpID: "a", Service: "s", Method: "M", Started: t0},
	}
	h := NewManagement(ManagementConfig{Members: testMembers(), Metrics: fakeMetrics{}, Ops: []runtime.InFlighter{ops}, Groups: []string{"g0", "g1"}})

	body := do(t, h, call{method: "GET", path: "/cluster/members", status: 200})
	var all []MemberStatus
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(all, testMembers().all) {
		t.Errorf("members = %+v", all)
	}
	do(t, h, call{method: "GET", path: "/cluster/members/remote", status: 200,
		contains: `{"name":"remote","group":"g1","address":"10.0.0.2:9000","gossip_address":"10.0.0.2:7946","services":["bank.Accounts"],"state":"suspect","since":"2026-01-02T03:04:05Z"}`})
	do(t, h, call{method: "GET", path: "/cluster/members/nobody", status: 404, contains: `unknown member \"nobody\"`})
	do(t, h, call{method: "GET", path: "/health/alive", status: 200, contains: `{"alive":true}`})
	do(t, h, call{method: "GET", path: "/health/ready", status: 200, contains: `{"ready":true}`})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: "" +
		"# HELP ffgen_cluster_members Cluster members known to this node, by state.\n" +
		"# TYPE ffgen_cluster_members gauge\n" +
		"ffgen_cluster_members{state=\"alive\"} 1\n" +
		"ffgen_cluster_members{state=\"dead\"} 1\n" +
		"ffgen_cluster_members{state=\"leaving\"} 0\n" +
		"ffgen_cluster_members{state=\"left\"} 0\n" +
		"ffgen_cluster_members{state=\"suspect\"} 1\n"})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: "ffgen_x_total 1\n"})
	body = do(t, h, call{method: "GET", path: "/ops", status: 200})
	var got []runtime.OpInfo
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].OpID != "a" || got[1].OpID != "b" {
		t.Errorf("ops = %+v, want a then b (by start time)", got)
	}
	do(t, h, call{method: "GET", path: "/nothing", status: 404, contains: "no endpoint"})
}

func TestManagementEmptyOpsAndNoMetrics(t *testing.T) {
	h := NewManagement(ManagementConfig{Members: testMembers()})
	do(t, h, call{method: "GET", path: "/ops", status: 200, contains: "[]"})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: `ffgen_cluster_members{state="alive"} 1`})
}

func TestManagementMetricsError(t *testing.T) {
	h := NewManagement(ManagementConfig{Members: testMembers(), Metrics: fakeMetrics{err: errors.New("boom")}})
	do(t, h, call{method: "GET", path: "/metrics", status: 500, contains: "boom"})
}

func TestManagementReadiness(t *testing.T) {
	m := testMembers()
	h := NewManagement(ManagementConfig{Members: m, Groups: []string{"g0", "g1", "g2", "g3"}})
	// g2's only member is dead, g3 has none.
	do(t, h, call{method: "GET", path: "/health/ready", status: 503, contains: `{"ready":false,"error":"no live member in failure group(s) g2, g3"}`})
	m.joined = false
	do(t, h, call{method: "GET", path: "/health/ready", status: 503, contains: `not joined`})
	// Liveness does not depend on the cluster.
	do(t, h, call{method: "GET", path: "/health/alive", status: 200})
}

func TestManagementOperations(t *testing.T) {
	ro := &fakeOperator{}
	h := NewManagement(ManagementConfig{Members: testMembers(), Operator: ro})
	for _, method := range []string{"PUT", "POST", "DELETE"} {
		do(t, h, call{method: method, path: "/cluster/members/local", body: `{"operation":"leave"}`, status: 403, contains: "read-only"})
	}
	if len(ro.calls) != 0 {
		t.Fatalf("read-only handler operated: %v", ro.calls)
	}

	op := &fakeOperator{}
	h = NewManagement(ManagementConfig{Members: testMembers(), Operator: op, ReadWrite: true})
	do(t, h, call{method: "PUT", path: "/cluster/members/local", body: `{"operation":"leave"}`, status: 200, contains: `"operation":"leave"`})
	do(t, h, call{method: "POST", path: "/cluster/members/local", body: `{"operation":"Down"}`, status: 200, contains: `"operation":"down"`})
	do(t, h, call{method: "DELETE", path: "/cluster/members/local", status: 200, contains: `"operation":"leave"`})
	do(t, h, call{method: "PUT", path: "/cluster/members/local", body: `{"operation":"explode"}`, status: 400, contains: "explode"})
	do(t, h, call{method: "PUT", path: "/cluster/members/local", body: `not json`, status: 400, contains: "body must be"})
	do(t, h, call{method: "PUT", path: "/cluster/members/local", body: `{"operation":"leave","x":1}`, status: 400, contains: "unknown field"})
	do(t, h, call{method: "PUT", path: "/cluster/members/local", body: `{"operation":"` + strings.Repeat("x", 2000) + `"}`, status: 400, contains: "too large"})
	do(t, h, call{method: "PUT", path: "/cluster/members/nobody", body: `{"operation":"leave"}`, status: 404, contains: "unknown member"})
	do(t, h, call{method: "PUT", path: "/cluster/members/remote", body: `{"operation":"down"}`, status: 409, contains: "local node only"})
	want := []string{"local:leave", "local:down", "local:leave", "nobody:leave", "remote:down"}
	if !reflect.DeepEqual(op.calls, want) {
		t.Errorf("operations = %v, want %v", op.calls, want)
	}

	h = NewManagement(ManagementConfig{Members: testMembers(), ReadWrite: true})
	do(t, h, call{method: "DELETE", path: "/cluster/members/local", status: 501, contains: "no member operator"})
}

func TestManagementToken(t *testing.T) {
	h := NewManagement(ManagementConfig{Members: testMembers(), Operator: &fakeOperator{}, Token: "s3cret"})
	for _, path := range []string{"/cluster/members", "/health/alive", "/metrics", "/ops"} {
		do(t, h, call{method: "GET", path: path, status: 401, contains: "bearer token"})
		do(t, h, call{method: "GET", path: path, token: "wrong", status: 401, contains: "bearer token"})
		do(t, h, call{method: "GET", path: path, token: "s3cret", status: 200})
	}
	// The token authenticates; it does not make a read-only API writable.
	do(t, h, call{method: "DELETE", path: "/cluster/members/local", token: "s3cret", status: 403, contains: "read-only"})
}

func TestServeManagementRefusesInsecureBind(t *testing.T) {
	cfg := ManagementConfig{Members: testMembers()}
	for _, addr := range []string{"0.0.0.0:0", ":0", "10.1.2.3:0"} {
		if _, err := ServeManagement(addr, cfg, nil); !errors.Is(err, ErrInsecureManagement) {
			t.Errorf("ServeManagement(%s) = %v, want ErrInsecureManagement", addr, err)
		}
	}
	// Server TLS without client certificates is not mutual TLS.
	if _, err := ServeManagement("0.0.0.0:0", cfg, &tls.Config{}); !errors.Is(err, ErrInsecureManagement) {
		t.Errorf("plain TLS accepted: %v", err)
	}
	if _, err := ServeManagement("no-port", cfg, nil); err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Errorf("bad address: %v", err)
	}
	// With a token, any address is allowed.
	cfg.Token = "t"
	s, err := ServeManagement("0.0.0.0:0", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestServeManagementLoopback(t *testing.T) {
	s, err := ServeManagement("127.0.0.1:0", ManagementConfig{Members: testMembers()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	resp, err := http.Get("http://" + s.Addr().String() + "/health/alive")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// The real Cluster behind the handler: members, readiness, and leave.
func TestManagementOnCluster(t *testing.T) {
	a := startNode(t, "a", "g0")
	b := startNode(t, "b", "g1", seeds(a))
	// Both must know each other before b leaves: a node that leaves before
	// it has heard of any peer announces its leave to no one, and a then
	// sees it die instead.
	testkit.Until(t, "a and b see each other", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
	stats := NewStats()
	stats.Failover("bank.Accounts", "Deposit", runtime.ReasonHeartbeatTimeout)
	h := NewManagement(ManagementConfig{Members: a, Operator: a, Metrics: stats, ReadWrite: true, Groups: []string{"g0", "g1"}})

	body := do(t, h, call{method: "GET", path: "/cluster/members", status: 200})
	var all []MemberStatus
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Name != "a" || !all[0].Local || all[1].Name != "b" || all[1].Address != "rpc-b:9000" {
		t.Fatalf("members = %+v", all)
	}
	do(t, h, call{method: "GET", path: "/health/ready", status: 200})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: `ffgen_failovers_total{method="Deposit",reason="heartbeat-timeout",service="bank.Accounts"} 1`})
	do(t, h, call{method: "PUT", path: "/cluster/members/b", body: `{"operation":"leave"}`, status: 409, contains: "local node only"})
	do(t, h, call{method: "GET", path: "/cluster/members/zz", status: 404})

	// b leaves through its own endpoint; a then is not ready for g1.
	hb := NewManagement(ManagementConfig{Members: b, Operator: b, ReadWrite: true})
	do(t, hb, call{method: "DELETE", path: "/cluster/members/b", status: 200})
	testkit.Until(t, "a sees b leave", func() bool {
		st := state(a, "b")
		if st == StateDead {
			t.Fatalf("a sees b as dead, not left")
		}
		return st == StateLeaving || st == StateLeft
	})
	do(t, h, call{method: "GET", path: "/health/ready", status: 503, contains: "g1"})
}

func TestManagementExtraRoutes(t *testing.T) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"hello": r.PathValue("who")})
	})
	h := NewManagement(ManagementConfig{Members: testMembers(), Token: "s3cret", Routes: map[string]http.Handler{
		"GET /app/hello/{who}": hello,
		"GET /app/status":      hello,
	}})
	do(t, h, call{method: "GET", path: "/app/hello/bob", token: "s3cret", status: 200, contains: `{"hello":"bob"}`})
	do(t, h, call{method: "HEAD", path: "/app/status", token: "s3cret", status: 200})
	// The token guards extra routes like the built-in ones.
	do(t, h, call{method: "GET", path: "/app/hello/bob", status: 401, contains: "bearer token"})
	do(t, h, call{method: "GET", path: "/app/hello/bob", token: "wrong", status: 401, contains: "bearer token"})
	// Read-only: another method finds no endpoint.
	do(t, h, call{method: "POST", path: "/app/status", token: "s3cret", status: 404, contains: "no endpoint POST /app/status"})
	// Built-in routes are unaffected.
	do(t, h, call{method: "GET", path: "/health/alive", token: "s3cret", status: 200, contains: `{"alive":true}`})
	do(t, h, call{method: "GET", path: "/app/nothing", token: "s3cret", status: 404, contains: "no endpoint"})
}

func TestManagementBadRoutes(t *testing.T) {
	ok := http.NotFoundHandler()
	for _, tc := range []struct {
		routes   map[string]http.Handler
		contains string
	}{
		{map[string]http.Handler{"GET /metrics": ok}, "/metrics is reserved"},
		{map[string]http.Handler{"GET /cluster/members/{name}/x": ok}, "/cluster is reserved"},
		{map[string]http.Handler{"GET /health": ok}, "/health is reserved"},
		{map[string]http.Handler{"GET /%6Fps/x": ok}, "/ops is reserved"},
		// Overlaps GET /cluster/members/{name} with neither more specific.
		{map[string]http.Handler{"GET /{any}/members/bob": ok}, "conflicts with"},
		{map[string]http.Handler{"GET /a/{x}": ok, "GET /a/{y}": ok}, "conflicts with"},
		{map[string]http.Handler{"POST /app/x": ok}, "read-only"},
		{map[string]http.Handler{"/app/x": ok}, "read-only"},
		{map[string]http.Handler{"GET example.com/app": ok}, "no host"},
		{map[string]http.Handler{"GET /app/{bad": ok}, "bad wildcard"},
		{map[string]http.Handler{"GET /app/x": nil}, "nil handler"},
	} {
		cfg := ManagementConfig{Members: testMembers(), Token: "t", Routes: tc.routes}
		err := cfg.Validate()
		if !errors.Is(err, ErrBadRoute) || !strings.Contains(err.Error(), tc.contains) {
			t.Errorf("routes %v: Validate = %v, want ErrBadRoute containing %q", slices.Collect(maps.Keys(tc.routes)), err, tc.contains)
			continue
		}
		if s, err := ServeManagement("127.0.0.1:0", cfg, nil); !errors.Is(err, ErrBadRoute) {
			if s != nil {
				s.Shutdown(context.Background())
			}
			t.Errorf("routes %v: ServeManagement = %v, want ErrBadRoute", slices.Collect(maps.Keys(tc.routes)), err)
		}
		func() {
			defer func() {
				if r, _ := recover().(error); !errors.Is(r, ErrBadRoute) {
					t.Errorf("routes %v: NewManagement panicked with %v, want ErrBadRoute", slices.Collect(maps.Keys(tc.routes)), r)
				}
			}()
			NewManagement(cfg)
		}()
	}
	if err := (ManagementConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "Members is required") {
		t.Errorf("config without Members: Validate = %v", err)
	}
	if err := (ManagementConfig{Members: testMembers(), Routes: map[string]http.Handler{"GET /": ok, "GET /app/{rest...}": ok}}).Validate(); err != nil {
		t.Errorf("valid routes rejected: %v", err)
	}
}

// Extra routes over a real socket, beyond loopback with a token.
func TestServeManagementExtraRouteWithToken(t *testing.T) {
	cfg := ManagementConfig{Members: testMembers(), Token: "s3cret", Routes: map[string]http.Handler{
		"GET /app/balances": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "42") }),
	}}
	s, err := ServeManagement("0.0.0.0:0", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	url := fmt.Sprintf("http://127.0.0.1:%d/app/balances", s.Addr().(*net.TCPAddr).Port)
	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("s3cret"); code != 200 || body != "42" {
		t.Errorf("with token: %d %q", code, body)
	}
	if code, _ := get(""); code != 401 {
		t.Errorf("without token: %d, want 401", code)
	}
}

func TestCheckManagementAddr(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:8558", "localhost:1", "[::1]:2"} {
		if err := CheckManagementAddr(ok, "", nil); err != nil {
			t.Errorf("CheckManagementAddr(%q) = %v", ok, err)
		}
	}
	mutual := &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}
	for _, addr := range []string{"0.0.0.0:8558", ":8558", "10.0.0.1:1", "example.com:1"} {
		if err := CheckManagementAddr(addr, "", nil); !errors.Is(err, ErrInsecureManagement) {
			t.Errorf("CheckManagementAddr(%s) = %v, want ErrInsecureManagement", addr, err)
		}
		if err := CheckManagementAddr(addr, "", &tls.Config{ClientAuth: tls.RequireAnyClientCert}); !errors.Is(err, ErrInsecureManagement) {
			t.Errorf("CheckManagementAddr(%s) with unverified client certs = %v, want ErrInsecureManagement", addr, err)
		}
		if err := CheckManagementAddr(addr, "t", nil); err != nil {
			t.Errorf("CheckManagementAddr(%s) with a token = %v", addr, err)
		}
		if err := CheckManagementAddr(addr, "", mutual); err != nil {
			t.Errorf("CheckManagementAddr(%s) with mutual TLS = %v", addr, err)
		}
	}
	if err := CheckManagementAddr("no-port", "t", nil); err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Errorf("bad address with a token: %v", err)
	}
}

type fakeReplicas []runtime.ReplicaStatus

func (f fakeReplicas) Replication() []runtime.ReplicaStatus { return f }

// A replica that does not serve makes the node unready and says why; its
// state is on /cluster/replicas and /metrics.
func TestManagementReplicas(t *testing.T) {
	reps := fakeReplicas{{Service: "bank.Accounts", Ready: false, NotReady: "catching up: applied 6 of 9", Commit: 9, Applied: 6,
		Role: "voter", Voters: []string{"a1", "b1", "t1"}}}
	h := NewManagement(ManagementConfig{Members: testMembers(), Replicas: reps})
	do(t, h, call{method: "GET", path: "/health/ready", status: 503, contains: `bank.Accounts: catching up: applied 6 of 9`})
	do(t, h, call{method: "GET", path: "/cluster/replicas", status: 200, contains: `"voters":["a1","b1","t1"]`})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: `ffgen_replica_voters{service="bank.Accounts"} 3`})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: `ffgen_replica_applied_index{service="bank.Accounts"} 6`})
	reps[0].Ready = true
	do(t, h, call{method: "GET", path: "/health/ready", status: 200})
	do(t, h, call{method: "GET", path: "/metrics", status: 200, contains: `ffgen_replica_ready{service="bank.Accounts"} 1`})
}

// removingReplicas removes a node from a replicated service's group, as
// runtime.Server does on the leader.
type removingReplicas struct {
	fakeReplicas
	removed []string
}

func (r *removingReplicas) RemoveReplica(_ context.Context, service, node string) error {
	switch {
	case service != "bank.Accounts":
		return fmt.Errorf("ffgen: %s: %w", service, runtime.ErrNotReplicated)
	case node == "b9":
		return errors.New("b9 is not a member of the group")
	}
	r.removed = append(r.removed, node)
	return nil
}

// An operator takes a dead node out of a replicated service's group; the
// endpoint writes, so it is refused on a read-only API.
func TestManagementRemoveReplica(t *testing.T) {
	reps := &removingReplicas{fakeReplicas: fakeReplicas{{Service: "bank.Accounts", Ready: true, Voters: []string{"a1", "b1", "t1"}}}}
	ro := NewManagement(ManagementConfig{Members: testMembers(), Replicas: reps})
	do(t, ro, call{method: "DELETE", path: "/cluster/replicas/bank.Accounts/voters/a1", status: 403})
	h := NewManagement(ManagementConfig{Members: testMembers(), Replicas: reps, ReadWrite: true})
	do(t, h, call{method: "DELETE", path: "/cluster/replicas/bank.Accounts/voters/a1", status: 200, contains: `"removed":"a1"`})
	do(t, h, call{method: "DELETE", path: "/cluster/replicas/bank.Other/voters/a1", status: 404, contains: "not a replicated service"})
	do(t, h, call{method: "DELETE", path: "/cluster/replicas/bank.Accounts/voters/b9", status: 409, contains: "not a member"})
	if len(reps.removed) != 1 || reps.removed[0] != "a1" {
		t.Errorf("removed %v, want [a1]", reps.removed)
	}
	plain := NewManagement(ManagementConfig{Members: testMembers(), Replicas: fakeReplicas{}, ReadWrite: true})
	do(t, plain, call{method: "DELETE", path: "/cluster/replicas/bank.Accounts/voters/a1", status: 501})
}

// With PublicHealth, probes without the token get the health answers but
// not the reason a node is not ready, and nothing else.
func TestManagementPublicHealth(t *testing.T) {
	members := testMembers()
	members.joined = false
	h := NewManagement(ManagementConfig{Members: members, Token: "s3cret", PublicHealth: true})
	do(t, h, call{method: "GET", path: "/health/alive", status: 200, contains: `"alive":true`})
	do(t, h, call{method: "HEAD", path: "/health/ready", status: 503})
	body := do(t, h, call{method: "GET", path: "/health/ready", status: 503, contains: "needs the token"})
	if strings.Contains(body, "not joined") {
		t.Errorf("the reason went to a request without the token: %s", body)
	}
	do(t, h, call{method: "GET", path: "/health/ready", token: "s3cret", status: 503, contains: "not joined"})
	for _, path := range []string{"/cluster/members", "/metrics", "/ops", "/health/other"} {
		do(t, h, call{method: "GET", path: path, status: 401, contains: "bearer token"})
	}
}

// pprof is served under the same token as every other route, and can be
// turned off.
func TestManagementPprof(t *testing.T) {
	h := NewManagement(ManagementConfig{Members: testMembers(), Token: "s3cret"})
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		do(t, h, call{method: "GET", path: path, status: 401, contains: "bearer token"})
	}
	do(t, h, call{method: "GET", path: "/debug/pprof/", token: "s3cret", status: 200, contains: "goroutine"})
	do(t, h, call{method: "GET", path: "/debug/pprof/goroutine?debug=1", token: "s3cret", status: 200, contains: "goroutine profile:"})
	heap := do(t, h, call{method: "GET", path: "/debug/pprof/heap", token: "s3cret", status: 200})
	if len(heap) < 2 || heap[0] != 0x1f || heap[1] != 0x8b { // a gzipped profile.proto
		t.Errorf("heap profile is not a gzipped protobuf: % x", heap[:min(len(heap), 8)])
	}
	do(t, h, call{method: "GET", path: "/debug/pprof/nothing", token: "s3cret", status: 404, contains: "no profile"})
	do(t, h, call{method: "GET", path: "/debug/pprof/profile?seconds=100000", token: "s3cret", status: 400, contains: "seconds must be"})
	do(t, h, call{method: "GET", path: "/debug/pprof/cmdline", token: "s3cret", status: 404, contains: "no profile"})

	off := NewManagement(ManagementConfig{Members: testMembers(), DisablePprof: true})
	do(t, off, call{method: "GET", path: "/debug/pprof/", status: 404, contains: "disabled"})
	if err := (ManagementConfig{Members: testMembers(), Routes: map[string]http.Handler{"GET /debug/x": http.NotFoundHandler()}}).Validate(); !errors.Is(err, ErrBadRoute) {
		t.Errorf("an extra route under /debug: %v, want ErrBadRoute", err)
	}
}
