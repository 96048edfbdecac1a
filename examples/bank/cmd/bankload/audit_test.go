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
		{"declared fail error", bank.ErrInsufficientFunds, refused},
		{"never sent", &runtime.Error{Delivery: runtime.NotDelivered, Err: context.DeadlineExceeded}, notExecuted},
		{"every node busy", &runtime.Error{Delivery: runtime.NotDelivered, Err: bank.ErrLedgerBusy}, notExecuted},
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
	m.record(refused, delta{"a", 1000})
	m.record(notExecuted, delta{"a", 2000})
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
// last one repeatedly, and /bank/journal from the journal entries given.
func serveReports(t *testing.T, journal []bank.JournalEntry, reports ...cli.Report) string {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == cli.JournalPath:
			json.NewEncoder(w).Encode(cli.JournalReport{Journal: bank.Journal{Capacity: 100, Entries: journal}})
		case r.URL.Path != cli.BalancesPath || r.URL.Query().Get("prefix") != "run-":
			http.NotFound(w, r)
		default:
			i := min(int(n.Add(1))-1, len(reports)-1)
			json.NewEncoder(w).Encode(reports[i])
		}
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
	spec := auditSpec{model: m, addrs: []string{serveReports(t, nil, good), serveReports(t, nil, lagging, lagging, good), dead}, prefix: "run-", timeout: 5 * time.Second}
	res := audit(context.Background(), testClient, spec)
	if !res.passed {
		t.Fatalf("audit failed: %+v", res.nodes)
	}
	if !res.nodes[0].Passed || !res.nodes[1].Passed || res.nodes[2].Reachable {
		t.Fatalf("nodes = %+v; want the first two passed, the third unreachable", res.nodes)
	}
	spec.requireAll, spec.timeout = true, 300*time.Millisecond
	if res := audit(context.Background(), testClient, spec); res.passed || res.nodes[2].Passed {
		t.Fatalf("audit requiring every node passed without the dead one: %+v", res.nodes)
	}
}

func TestAuditFailsOnDivergence(t *testing.T) {
	m := newModel([]string{"run-a"}, 10)
	bad := cli.Report{Node: "n1", Snapshot: bank.Snapshot{Balances: map[string]int64{"run-a": 20}}}
	res := audit(context.Background(), testClient, auditSpec{model: m, addrs: []string{serveReports(t, nil, bad)}, prefix: "run-", timeout: 300 * time.Millisecond})
	if res.passed || res.nodes[0].Passed || len(res.nodes[0].Mismatches) != 1 {
		t.Fatalf("audit of a diverged node passed: %+v", res.nodes)
	}
	if res := audit(context.Background(), testClient, auditSpec{model: m, addrs: []string{"127.0.0.1:1"}, prefix: "run-", timeout: 300 * time.Millisecond}); res.passed {
		t.Fatal("audit with no reachable node passed")
	}
}

// The journal check measures each kind of problem on each node, and counts
// distinct writes over the nodes.
func TestAuditChecksJournals(t *testing.T) {
	m := newModel([]string{"run-a"}, 10)
	writes := []writeRecord{
		{ID: "01", Method: "Deposit", Outcome: applied, Amount: 15, Deltas: []delta{{"run-a", 5}}},
		{ID: "02", Method: "Withdraw", Outcome: refused, Err: bank.ErrInsufficientFunds.Error(), Deltas: []delta{{"run-a", -100}}},
		{ID: "03", Method: "Deposit", Outcome: notExecuted, Deltas: []delta{{"run-a", 1}}},
		{ID: "04", Method: "Deposit", Outcome: unknown, Deltas: []delta{{"run-a", 2}}},
	}
	for _, w := range writes {
		m.record(w.Outcome, w.Deltas...)
	}
	report := func(bal int64) cli.Report {
		return cli.Report{Snapshot: bank.Snapshot{Balances: map[string]int64{"run-a": bal}}}
	}
	good := []bank.JournalEntry{{ID: "01", Runs: 1, Amount: 15}, {ID: "02", Runs: 1, Err: bank.ErrInsufficientFunds.Error()}, {ID: "ff", Runs: 3}}
	lostAndTwice := []bank.JournalEntry{{ID: "02", Runs: 2, Err: bank.ErrInsufficientFunds.Error()}, {ID: "04", Runs: 1, Amount: 17}}
	contra := []bank.JournalEntry{{ID: "01", Runs: 1, Amount: 16}, {ID: "02", Runs: 1, Amount: 15}, {ID: "03", Runs: 1}}
	res := audit(context.Background(), testClient, auditSpec{
		model: m, writes: writes, prefix: "run-", timeout: 300 * time.Millisecond,
		addrs: []string{serveReports(t, good, report(15)), serveReports(t, lostAndTwice, report(15)), serveReports(t, contra, report(15))},
	})
	if res.passed || !res.nodes[0].Passed || res.nodes[1].Passed || res.nodes[2].Passed {
		t.Fatalf("want only the first node to pass: %+v", res.nodes)
	}
	n1, n2 := res.nodes[1], res.nodes[2]
	if n1.Lost != 1 || n1.AppliedTwice != 1 || n1.Contradicting != 0 {
		t.Errorf("node 2: lost %d, twice %d, contradicting %d; want 1, 1, 0", n1.Lost, n1.AppliedTwice, n1.Contradicting)
	}
	if n2.Lost != 0 || n2.AppliedTwice != 0 || n2.Contradicting != 3 {
		t.Errorf("node 3: lost %d, twice %d, contradicting %d; want 0, 0, 3 (%q)", n2.Lost, n2.AppliedTwice, n2.Contradicting, n2.Problems)
	}
	if res.lost != 1 || res.twice != 1 || res.contradicting != 3 {
		t.Errorf("distinct: lost %d, twice %d, contradicting %d; want 1, 1, 3", res.lost, res.twice, res.contradicting)
	}
	// A journal that forgot entries cannot prove a write lost.
	n := cli.NodeAudit{}
	if lost, _, _ := checkJournal(&n, cli.JournalReport{Journal: bank.Journal{Evicted: 1}}, map[string]*writeRecord{"01": &writes[0]}); len(lost) != 0 || n.JournalEvicted != 1 {
		t.Errorf("lost %v counted on a journal that forgot entries", lost)
	}
}

func TestWriteLogsMergeIntoOneModel(t *testing.T) {
	dir := t.TempDir()
	a := &writeLog{Run: "run", Writer: "w1", Accounts: 2, Initial: 10}
	b := &writeLog{Run: "run", Writer: "w2", Accounts: 2, Initial: 10}
	a.add([16]byte{1}, "Deposit", 15, nil, delta{"run-00000", 5})
	b.add([16]byte{2}, "Transfer", 0, bank.ErrInsufficientFunds, delta{"run-00001", -50}, delta{"run-00000", 50})
	b.add([16]byte{3}, "Withdraw", 0, &runtime.Error{Delivery: runtime.Delivered, Err: context.DeadlineExceeded}, delta{"run-00001", -3})
	paths := []string{dir + "/a.json", dir + "/b.json"}
	for i, l := range []*writeLog{a, b} {
		if err := l.save(paths[i]); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := loadLogs(paths)
	if err != nil {
		t.Fatal(err)
	}
	m, all := merge(logs)
	if len(all) != 3 || all[1].Outcome != refused || all[1].Err != bank.ErrInsufficientFunds.Error() || all[2].Outcome != unknown {
		t.Fatalf("writes = %+v", all)
	}
	if mm := m.check(cli.Report{Snapshot: bank.Snapshot{Balances: map[string]int64{"run-00000": 15, "run-00001": 7}}}); len(mm) != 0 {
		t.Errorf("merged model rejects a valid ledger: %v", mm)
	}
	if mm := m.check(cli.Report{Snapshot: bank.Snapshot{Balances: map[string]int64{"run-00000": 65, "run-00001": 10}}}); len(mm) != 1 {
		t.Errorf("merged model accepts a refused transfer applied: %v", mm)
	}
	other := &writeLog{Run: "other", Accounts: 2, Initial: 10}
	if err := other.save(dir + "/c.json"); err != nil {
		t.Fatal(err)
	}
	if _, err := loadLogs([]string{paths[0], dir + "/c.json"}); err == nil || !strings.Contains(err.Error(), "run other") {
		t.Errorf("logs of two runs merged: %v", err)
	}
}
