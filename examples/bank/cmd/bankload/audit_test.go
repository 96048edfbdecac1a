package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want outcome
	}{
		{"success", nil, applied},
		{"declared fail error", bank.ErrInsufficientFunds, notApplied},
		{"never sent", &runtime.Error{Delivery: runtime.NotDelivered, Err: context.DeadlineExceeded}, notApplied},
		{"sent, timed out", &runtime.Error{Delivery: runtime.Delivered, Err: context.DeadlineExceeded}, unknown},
		{"acknowledged, no answer", &runtime.Error{Delivery: runtime.Acknowledged}, unknown},
		{"wrapped", errors.Join(errors.New("x"), &runtime.Error{Delivery: runtime.Acknowledged}), unknown},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("%s: classify = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestModelAcceptsEitherOutcomeOfUncertainWrites(t *testing.T) {
	m := newModel([]string{"a", "b"}, 100)
	m.record(applied, delta{"a", -30}, delta{"b", 30})
	m.record(notApplied, delta{"a", 1000})
	m.record(unknown, delta{"a", 5})
	m.record(unknown, delta{"a", -7})

	for _, c := range []struct {
		a    int64
		want bool
	}{
		{70, true}, {75, true}, {63, true}, {68, true}, // every subset of {+5, -7}
		{71, false}, {1070, false}, {100, false},
	} {
		r := cli.Report{Snapshot: bank.Snapshot{Balances: map[string]int64{"a": c.a, "b": 130}}}
		if got := len(m.check(r)) == 0; got != c.want {
			t.Errorf("a=%d: passes %v, want %v (%v)", c.a, got, c.want, m.check(r))
		}
	}
	if n := m.uncertainOps(); n != 2 {
		t.Errorf("uncertain = %d, want 2", n)
	}
	if mm := m.check(cli.Report{Snapshot: bank.Snapshot{Balances: map[string]int64{"a": 70}}}); len(mm) != 1 || !strings.Contains(mm[0], "b: missing") {
		t.Errorf("missing account not reported: %v", mm)
	}
}

func TestModelRangeBeyondExactLimit(t *testing.T) {
	m := newModel([]string{"a"}, 0)
	for range maxExact + 1 {
		m.record(unknown, delta{"a", 2})
	}
	m.record(unknown, delta{"a", -3})
	e := m.accounts["a"]
	if !e.explains(-3) || !e.explains(2*(maxExact+1)) || e.explains(-4) || e.explains(2*(maxExact+1)+1) {
		t.Error("range check wrong beyond the exact limit")
	}
}

var testClient = cli.ManagementClient(2*time.Second, "")

// serveReports serves /bank/balances from reports, one per request, the
// last one repeatedly.
func serveReports(t *testing.T, reports ...cli.Report) string {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != cli.BalancesPath || r.URL.Query().Get("prefix") != "run-" {
			http.NotFound(w, r)
			return
		}
		i := min(int(n.Add(1))-1, len(reports)-1)
		json.NewEncoder(w).Encode(reports[i])
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestAuditWaitsForLaggingNodeAndSkipsDeadOne(t *testing.T) {
	m := newModel([]string{"run-a"}, 10)
	m.record(applied, delta{"run-a", 5})
	good := cli.Report{Node: "n1", Snapshot: bank.Snapshot{Balances: map[string]int64{"run-a": 15}}}
	lagging := cli.Report{Node: "n2", InFlight: 3, Snapshot: bank.Snapshot{Balances: map[string]int64{"run-a": 10}}}
	dead := "127.0.0.1:1" // nothing listens on port 1
	nodes, passed := audit(context.Background(), testClient, m, []string{serveReports(t, good), serveReports(t, lagging, lagging, good), dead}, "run-", 5*time.Second)
	if !passed {
		t.Fatalf("audit failed: %+v", nodes)
	}
	if !nodes[0].Passed || !nodes[1].Passed || nodes[2].Reachable {
		t.Fatalf("nodes = %+v; want the first two passed, the third unreachable", nodes)
	}
}

func TestAuditFailsOnDivergence(t *testing.T) {
	m := newModel([]string{"run-a"}, 10)
	bad := cli.Report{Node: "n1", Snapshot: bank.Snapshot{Balances: map[string]int64{"run-a": 20}}}
	nodes, passed := audit(context.Background(), testClient, m, []string{serveReports(t, bad)}, "run-", 300*time.Millisecond)
	if passed || nodes[0].Passed || len(nodes[0].Mismatches) != 1 {
		t.Fatalf("audit of a diverged node passed: %+v", nodes)
	}
	if _, passed := audit(context.Background(), testClient, m, []string{"127.0.0.1:1"}, "run-", 300*time.Millisecond); passed {
		t.Fatal("audit with no reachable node passed")
	}
}
