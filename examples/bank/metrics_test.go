package bank_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// oneMember is the membership the management handler reports.
type oneMember struct{}

func (oneMember) AllMembers() []cluster.MemberStatus {
	return []cluster.MemberStatus{{Name: "a1", Group: "a", State: cluster.StateAlive, Local: true}}
}
func (oneMember) Member(string) (cluster.MemberStatus, bool) { return cluster.MemberStatus{}, false }
func (oneMember) Joined() bool                               { return true }

// /metrics, scraped after traffic that succeeded, failed with a declared
// error and failed over, parses with the Prometheus text parser and holds
// the series operators build dashboards on, with their labels.
func TestMetricsEndpointCarriesTheSeries(t *testing.T) {
	synctest.Test(t, testMetricsEndpoint)
}

func testMetricsEndpoint(t *testing.T) {
	stats := cluster.NewStats()
	c := fftest.New(t, fftest.Config{PerGroup: 2, Server: func(_ string, cfg *runtime.ServerConfig) { cfg.Metrics = stats }})
	ledgers := map[string]*bank.Ledger{}
	c.Serve(t, bank.AccountsDesc, func(n *fftest.Node) any {
		l := bank.NewLedger(0)
		ledgers[n.Name] = l
		return l
	})
	client := c.Client(t, func(cfg *runtime.ClientConfig) { cfg.Metrics = stats })
	bc := &bankCluster{Cluster: c, ledgers: ledgers, client: client, accts: bank.NewAccountsClient(client)}
	ctx := context.Background()
	id := bc.accountOwnedBy(t, "a1")
	if _, err := bc.accts.Open(ctx, bank.OpenRequest{AccountID: id, Initial: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.accts.Withdraw(ctx, bank.WithdrawRequest{AccountID: id, Amount: 50}); !errors.Is(err, bank.ErrInsufficientFunds) {
		t.Fatalf("Withdraw = %v, want ErrInsufficientFunds", err)
	}
	c.WaitConverged(t)
	// Balance is a linearizable read: its first attempt goes to the
	// leader the client learned from the writes above.
	ledgers[c.Leader(t, bank.AccountsDesc.Name)].SetBusy(true)
	if b, err := bc.accts.Balance(ctx, id); err != nil || b.Amount != 10 {
		t.Fatalf("Balance = %+v, %v", b, err)
	}

	ops := []runtime.InFlighter{client}
	for _, n := range c.Nodes {
		ops = append(ops, n.Server)
	}
	h := cluster.NewManagement(cluster.ManagementConfig{Members: oneMember{}, Metrics: stats, Ops: ops,
		Replicas: c.Node("a1").Server, Token: "s3cret"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d, want 401", rec.Code)
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("the Prometheus text parser rejects /metrics: %v", err)
	}

	svc := bank.AccountsDesc.Name
	for _, c := range []struct {
		name   string
		typ    dto.MetricType
		labels map[string]string
		min    float64 // the least value (for a histogram, count) the traffic above implies
	}{
		{"ffgen_operations_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance", "outcome": "ok"}, 1},
		{"ffgen_operations_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Withdraw", "outcome": "error"}, 1},
		{"ffgen_attempts_started_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance"}, 2},
		{"ffgen_attempts_ended_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance", "reason": "failover-error"}, 1},
		{"ffgen_failovers_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance", "reason": "failover-error"}, 1},
		{"ffgen_heartbeat_timeouts_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance"}, 0},
		{"ffgen_client_attempts_in_flight", dto.MetricType_GAUGE, map[string]string{"service": svc, "method": "Balance"}, 0},
		{"ffgen_server_attempts_in_flight", dto.MetricType_GAUGE, map[string]string{"service": svc, "method": "Balance"}, 0},
		{"ffgen_attempt_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"service": svc, "method": "Balance"}, 2},
		{"ffgen_operation_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"service": svc, "method": "Open"}, 1},
		// Served per method, and errors by code.
		{"ffgen_server_handled_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance", "status": "ok", "code": ""}, 1},
		{"ffgen_server_handled_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Balance", "status": "failover", "code": "ErrLedgerBusy"}, 1},
		{"ffgen_server_handled_total", dto.MetricType_COUNTER, map[string]string{"service": svc, "method": "Withdraw", "status": "fail", "code": "ErrInsufficientFunds"}, 1},
		{"ffgen_server_handler_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"service": svc, "method": "Balance"}, 2},
		// Queue depth and held operations, node-wide.
		{"ffgen_server_operations", dto.MetricType_GAUGE, map[string]string{"state": "queued"}, 0},
		{"ffgen_server_operations", dto.MetricType_GAUGE, map[string]string{"state": "held"}, 0},
		{"ffgen_server_operations", dto.MetricType_GAUGE, map[string]string{"state": "running"}, 0},
		// Catch-up state of the replicated service.
		{"ffgen_replica_ready", dto.MetricType_GAUGE, map[string]string{"service": svc}, 1},
		{"ffgen_replica_applied_index", dto.MetricType_GAUGE, map[string]string{"service": svc}, 2},
		{"ffgen_replica_stopped", dto.MetricType_GAUGE, map[string]string{"service": svc}, 0},
		{"ffgen_cluster_members", dto.MetricType_GAUGE, map[string]string{"state": "alive"}, 1},
		// What every Go service exports.
		{"go_goroutines", dto.MetricType_GAUGE, nil, 1},
		{"go_gc_duration_seconds", dto.MetricType_SUMMARY, nil, 0},
		{"process_cpu_seconds_total", dto.MetricType_COUNTER, nil, 0},
		{"process_resident_memory_bytes", dto.MetricType_GAUGE, nil, 1},
	} {
		mf := fams[c.name]
		if mf == nil {
			t.Errorf("/metrics has no %s", c.name)
			continue
		}
		if mf.GetType() != c.typ {
			t.Errorf("%s is a %s, want %s", c.name, mf.GetType(), c.typ)
		}
		m := find(mf, c.labels)
		if m == nil {
			t.Errorf("%s has no series with labels %v", c.name, c.labels)
			continue
		}
		if v := value(m); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
}

// find returns the series of mf whose labels are exactly want.
func find(mf *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		// An empty label value is the same as no label to Prometheus.
		for k, v := range want {
			if v == "" {
				if _, ok := got[k]; !ok {
					got[k] = ""
				}
			}
		}
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	}
	return 0
}
