package cluster

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/tally"
	"github.com/ffgen/ffgen/runtime/transport"
)

// scrape registers c with a pedantic registry (which checks every metric
// against its descriptor), renders the text exposition as /metrics does,
// and parses it back with the Prometheus text parser.
func scrape(t testing.TB, c prometheus.Collector) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, buf.String())
	}
	return buf.String(), fams
}

// sample finds the sample of family name whose labels include want
// (alternating names and values) and returns its value; a histogram's is
// its count.
func sample(t testing.TB, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	mf := fams[name]
	if mf == nil {
		t.Fatalf("no family %s", name)
	}
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if v, ok := labels[want[i]]; !ok || v != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no sample %s%v", name, want)
	return 0
}

func TestStatsExposition(t *testing.T) {
	s := NewStats()
	// An operation that fails over once after a heartbeat timeout.
	s.AttemptStarted("bank.Accounts", "Deposit")
	s.AttemptEnded("bank.Accounts", "Deposit", runtime.ReasonHeartbeatTimeout, 200*time.Millisecond)
	s.Failover("bank.Accounts", "Deposit", runtime.ReasonHeartbeatTimeout)
	s.AttemptStarted("bank.Accounts", "Deposit")
	s.AttemptEnded("bank.Accounts", "Deposit", runtime.ReasonNone, 3*time.Millisecond)
	s.OperationEnded("bank.Accounts", "Deposit", true, 203*time.Millisecond)
	// A label that needs escaping, a failed operation, a running handler.
	const weird = `we"ird\svc` + "\n"
	s.OperationEnded(weird, "M", false, 20*time.Second)
	s.ServerAttempt("bank.Accounts", "Balance", 1)
	// Server answers: two served, a declared error, an undeclared one.
	s.Handled("bank.Accounts", "Balance", "ok", "", 2*time.Millisecond)
	s.Handled("bank.Accounts", "Balance", "ok", "", 4*time.Millisecond)
	s.Handled("bank.Accounts", "Balance", "fail", "ErrUnknownAccount", time.Millisecond)
	s.Handled("bank.Accounts", "Balance", "failover", "undeclared", time.Millisecond)

	text, fams := scrape(t, s)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ffgen_attempts_started_total", []string{"service", "bank.Accounts", "method", "Deposit"}, 2},
		{"ffgen_attempts_ended_total", []string{"method", "Deposit", "reason", "none"}, 1},
		{"ffgen_attempts_ended_total", []string{"method", "Deposit", "reason", "heartbeat-timeout"}, 1},
		{"ffgen_failovers_total", []string{"method", "Deposit", "reason", "heartbeat-timeout"}, 1},
		{"ffgen_heartbeat_timeouts_total", []string{"method", "Deposit"}, 1},
		{"ffgen_heartbeat_timeouts_total", []string{"method", "Balance"}, 0},
		{"ffgen_operations_total", []string{"method", "Deposit", "outcome", "ok"}, 1},
		{"ffgen_operations_total", []string{"method", "Deposit", "outcome", "error"}, 0},
		{"ffgen_operations_total", []string{"service", weird, "method", "M", "outcome", "error"}, 1},
		{"ffgen_client_attempts_in_flight", []string{"method", "Deposit"}, 0},
		{"ffgen_server_attempts_in_flight", []string{"method", "Balance"}, 1},
		{"ffgen_attempt_duration_seconds", []string{"method", "Deposit"}, 2},
		{"ffgen_operation_duration_seconds", []string{"service", weird, "method", "M"}, 1},
		{"ffgen_server_handled_total", []string{"method", "Balance", "status", "ok", "code", ""}, 2},
		{"ffgen_server_handled_total", []string{"method", "Balance", "status", "fail", "code", "ErrUnknownAccount"}, 1},
		{"ffgen_server_handled_total", []string{"method", "Balance", "status", "failover", "code", "undeclared"}, 1},
		{"ffgen_server_handler_duration_seconds", []string{"method", "Balance"}, 4},
	} {
		if got := sample(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Counters by reason list only the reasons that occurred.
	if n := len(fams["ffgen_failovers_total"].GetMetric()); n != 1 {
		t.Errorf("%d failover series, want 1:\n%s", n, text)
	}
	// Buckets are cumulative, bounds inclusive, in seconds.
	for _, m := range fams["ffgen_attempt_duration_seconds"].GetMetric() {
		if m.GetLabel()[0].GetValue() != "Deposit" {
			continue
		}
		h := m.GetHistogram()
		got := map[float64]uint64{}
		for _, b := range h.GetBucket() {
			got[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		if got[0.0025] != 0 || got[0.005] != 1 || got[0.1] != 1 || got[0.25] != 2 || got[10] != 2 || got[math.Inf(1)] != 2 || len(got) != len(tally.LatencyBuckets)+1 {
			t.Errorf("buckets %v", got)
		}
		if h.GetSampleSum() != 0.203 {
			t.Errorf("sum %v, want 0.203", h.GetSampleSum())
		}
	}
}

func TestStatsUnknownReasonCounted(t *testing.T) {
	s := NewStats()
	s.Failover("s", "m", runtime.Reason(200))
	_, fams := scrape(t, s)
	last := runtime.Reason(numReasons - 1).String()
	if got := sample(t, fams, "ffgen_failovers_total", "service", "s", "method", "m", "reason", last); got != 1 {
		t.Fatalf("unknown reason counted %v times in the last slot, want 1", got)
	}
}

func TestStatsConcurrent(t *testing.T) {
	s := NewStats()
	const workers, per = 8, 500
	methods := []string{"A", "B", "C"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				m := methods[(w+i)%len(methods)]
				s.AttemptStarted("svc", m)
				s.ServerAttempt("svc", m, 1)
				s.AttemptEnded("svc", m, runtime.ReasonConnBroken, time.Duration(i)*time.Millisecond)
				s.Failover("svc", m, runtime.ReasonConnBroken)
				s.OperationEnded("svc", m, i%2 == 0, time.Millisecond)
				s.ServerAttempt("svc", m, -1)
				s.Handled("svc", m, "fail", fmt.Sprint("E", i%3), time.Millisecond)
			}
		})
		// Export while counting: must not race or tear.
		wg.Go(func() {
			reg := prometheus.NewRegistry()
			reg.MustRegister(s)
			for range 5 {
				if _, err := reg.Gather(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	var started, ok, failovers, ended uint64
	for _, ms := range *s.methods.Load() {
		started += ms.attempts.Load()
		ok += ms.opsOK.Load()
		failovers += ms.failovers[runtime.ReasonConnBroken].Load()
		ended += ms.attemptEnds[runtime.ReasonConnBroken].Load()
		if ms.clientInFlight.Load() != 0 || ms.served.Running.Load() != 0 {
			t.Errorf("in-flight gauges not back to zero: %d %d", ms.clientInFlight.Load(), ms.served.Running.Load())
		}
		var inHist uint64
		counts, _ := ms.opLatency.Load()
		for _, n := range counts {
			inHist += n
		}
		if inHist != ms.opsOK.Load()+ms.opsErr.Load() {
			t.Errorf("histogram count %d != operations %d", inHist, ms.opsOK.Load()+ms.opsErr.Load())
		}
	}
	const total = workers * per
	if started != total || ended != total || failovers != total || ok != total/2 {
		t.Fatalf("started=%d ended=%d failovers=%d ok=%d, want %d %d %d %d", started, ended, failovers, ok, total, total, total, total/2)
	}
	if n := len(*s.methods.Load()); n != len(methods) {
		t.Fatalf("%d method entries, want %d", n, len(methods))
	}
}

func TestStatsHotPathDoesNotAllocate(t *testing.T) {
	s := NewStats()
	s.AttemptStarted("svc", "m") // the first event creates the entry
	s.Handled("svc", "m", "ok", "", 0)
	allocs := testing.AllocsPerRun(100, func() {
		s.AttemptStarted("svc", "m")
		s.AttemptEnded("svc", "m", runtime.ReasonNone, time.Millisecond)
		s.Failover("svc", "m", runtime.ReasonDialFailed)
		s.OperationEnded("svc", "m", true, time.Millisecond)
		s.ServerAttempt("svc", "m", 1)
		s.Handled("svc", "m", "ok", "", time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per event batch, want 0", allocs)
	}
}

func BenchmarkStatsAttempt(b *testing.B) {
	s := NewStats()
	for _, m := range []string{"A", "B", "C", "D", "E", "F", "G", "H"} {
		s.AttemptStarted("bank.Accounts", m)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.AttemptStarted("bank.Accounts", "D")
			s.AttemptEnded("bank.Accounts", "D", runtime.ReasonNone, 2*time.Millisecond)
		}
	})
}

func BenchmarkStatsGather(b *testing.B) {
	s := NewStats()
	for _, m := range []string{"A", "B", "C", "D", "E", "F", "G", "H"} {
		s.OperationEnded("bank.Accounts", m, true, time.Millisecond)
		s.Failover("bank.Accounts", m, runtime.ReasonHeartbeatTimeout)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

type fixedNodeStats transport.NodeStats

var _ NodeStatser = fixedNodeStats{}

func (f fixedNodeStats) NodeStats() transport.NodeStats { return transport.NodeStats(f) }

// A watched transport's counters appear in the export, one series per
// cause of refusal.
func TestStatsTransportCounters(t *testing.T) {
	s := NewStats()
	s.WatchTransport(fixedNodeStats{Conns: 3, BufferedBytes: 4096, RefusedConns: 7, FrameTimeouts: 2, TLSFailures: 1, IdleClosed: 5,
		Handshakes: 4, Paced: 6, HandshakeLimit: 8, AcceptRateLimit: 9})
	_, fams := scrape(t, s)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ffgen_transport_connections", nil, 3},
		{"ffgen_transport_buffered_bytes", nil, 4096},
		{"ffgen_transport_refused_total", []string{"cause", "conn-limit"}, 7},
		{"ffgen_transport_refused_total", []string{"cause", "frame-timeout"}, 2},
		{"ffgen_transport_refused_total", []string{"cause", "tls"}, 1},
		{"ffgen_transport_refused_total", []string{"cause", "buffer-limit"}, 0},
		{"ffgen_transport_idle_closed_total", nil, 5},
		{"ffgen_transport_handshakes", nil, 4},
		{"ffgen_transport_paced_total", nil, 6},
		{"ffgen_transport_refused_total", []string{"cause", "handshake-limit"}, 8},
		{"ffgen_transport_refused_total", []string{"cause", "accept-rate"}, 9},
	} {
		if got := sample(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// The server's queue depth and the client's limits are exported.
func TestStatsExportsLoad(t *testing.T) {
	s := NewStats()
	s.WatchLoad(fakeLoad{runtime.Load{Pending: 7, MaxPending: 512, Queued: 5, MaxQueued: 64,
		QueueDelay: 3 * time.Millisecond, QueueDelayLimit: 6 * time.Millisecond}})
	s.WatchLimits(fakeLimits{{Node: "a1", Limit: 40, InFlight: 3, Waiting: 2, Decreases: runtime.LimitDecreases{Refused: 1, TimedOut: 2, Slow: 9}}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"ffgen_server_pending": 7, "ffgen_server_pending_limit": 512, "ffgen_server_queued": 5, "ffgen_server_queued_limit": 64,
		"ffgen_server_queue_delay_seconds": 0.003, "ffgen_server_queue_delay_limit_seconds": 0.006, "ffgen_client_limit": 40, "ffgen_client_limit_in_flight": 3, "ffgen_client_limit_waiting": 2}
	for _, mf := range got {
		if v, ok := want[mf.GetName()]; ok {
			if g := mf.GetMetric()[0].GetGauge().GetValue(); g != v {
				t.Errorf("%s = %v, want %v", mf.GetName(), g, v)
			}
			delete(want, mf.GetName())
		}
	}
	if len(want) > 0 {
		t.Errorf("not exported: %v", want)
	}
	decreases := map[string]float64{}
	for _, mf := range got {
		if mf.GetName() == "ffgen_client_limit_decreases_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "sign" {
						decreases[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if want := map[string]float64{"refused": 1, "timeout": 2, "slow": 9}; !maps.Equal(decreases, want) {
		t.Errorf("ffgen_client_limit_decreases_total by sign = %v, want %v", decreases, want)
	}
}

type fakeLoad struct{ l runtime.Load }

func (f fakeLoad) Load() runtime.Load { return f.l }

type fakeLimits []runtime.PeerLimit

func (f fakeLimits) Limits() []runtime.PeerLimit { return f }
