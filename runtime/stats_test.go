package runtime

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

func TestStatsPrometheusGolden(t *testing.T) {
	s := NewStats()
	// An operation that fails over once after a heartbeat timeout.
	s.AttemptStarted("bank.Accounts", "Deposit")
	s.AttemptEnded("bank.Accounts", "Deposit", ReasonHeartbeatTimeout, 200*time.Millisecond)
	s.Failover("bank.Accounts", "Deposit", ReasonHeartbeatTimeout)
	s.AttemptStarted("bank.Accounts", "Deposit")
	s.AttemptEnded("bank.Accounts", "Deposit", ReasonNone, 3*time.Millisecond)
	s.OperationEnded("bank.Accounts", "Deposit", true, 203*time.Millisecond)
	// A label that needs escaping, a failed operation, a running handler.
	s.OperationEnded(`we"ird\svc`+"\n", "M", false, 20*time.Second)
	s.ServerAttempt("bank.Accounts", "Balance", 1)

	var buf bytes.Buffer
	if err := s.WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	const esc = `we\"ird\\svc\n`
	want := `# HELP ffgen_attempts_started_total Attempts sent by the client.
# TYPE ffgen_attempts_started_total counter
ffgen_attempts_started_total{service="bank.Accounts",method="Balance"} 0
ffgen_attempts_started_total{service="bank.Accounts",method="Deposit"} 2
ffgen_attempts_started_total{service="` + esc + `",method="M"} 0
# HELP ffgen_attempts_ended_total Attempts ended on the client, by reason (none: the attempt produced the outcome).
# TYPE ffgen_attempts_ended_total counter
ffgen_attempts_ended_total{service="bank.Accounts",method="Deposit",reason="none"} 1
ffgen_attempts_ended_total{service="bank.Accounts",method="Deposit",reason="heartbeat-timeout"} 1
# HELP ffgen_failovers_total Moves to another node, by reason.
# TYPE ffgen_failovers_total counter
ffgen_failovers_total{service="bank.Accounts",method="Deposit",reason="heartbeat-timeout"} 1
# HELP ffgen_heartbeat_timeouts_total Attempts abandoned because no heartbeat came within the heartbeat timeout.
# TYPE ffgen_heartbeat_timeouts_total counter
ffgen_heartbeat_timeouts_total{service="bank.Accounts",method="Balance"} 0
ffgen_heartbeat_timeouts_total{service="bank.Accounts",method="Deposit"} 1
ffgen_heartbeat_timeouts_total{service="` + esc + `",method="M"} 0
# HELP ffgen_operations_total Operations ended on the client, by outcome.
# TYPE ffgen_operations_total counter
ffgen_operations_total{service="bank.Accounts",method="Balance",outcome="ok"} 0
ffgen_operations_total{service="bank.Accounts",method="Balance",outcome="error"} 0
ffgen_operations_total{service="bank.Accounts",method="Deposit",outcome="ok"} 1
ffgen_operations_total{service="bank.Accounts",method="Deposit",outcome="error"} 0
ffgen_operations_total{service="` + esc + `",method="M",outcome="ok"} 0
ffgen_operations_total{service="` + esc + `",method="M",outcome="error"} 1
# HELP ffgen_client_attempts_in_flight Attempts the client has started and not ended.
# TYPE ffgen_client_attempts_in_flight gauge
ffgen_client_attempts_in_flight{service="bank.Accounts",method="Balance"} 0
ffgen_client_attempts_in_flight{service="bank.Accounts",method="Deposit"} 0
ffgen_client_attempts_in_flight{service="` + esc + `",method="M"} 0
# HELP ffgen_server_attempts_in_flight Handlers running on the server.
# TYPE ffgen_server_attempts_in_flight gauge
ffgen_server_attempts_in_flight{service="bank.Accounts",method="Balance"} 1
ffgen_server_attempts_in_flight{service="bank.Accounts",method="Deposit"} 0
ffgen_server_attempts_in_flight{service="` + esc + `",method="M"} 0
# HELP ffgen_attempt_duration_seconds Attempt latency on the client.
# TYPE ffgen_attempt_duration_seconds histogram
` + hist("ffgen_attempt_duration_seconds", "bank.Accounts", "Balance", "0", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) +
		hist("ffgen_attempt_duration_seconds", "bank.Accounts", "Deposit", "0.203", 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2) +
		hist("ffgen_attempt_duration_seconds", esc, "M", "0", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) +
		`# HELP ffgen_operation_duration_seconds Operation latency on the client, failovers included.
# TYPE ffgen_operation_duration_seconds histogram
` + hist("ffgen_operation_duration_seconds", "bank.Accounts", "Balance", "0", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) +
		hist("ffgen_operation_duration_seconds", "bank.Accounts", "Deposit", "0.203", 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1) +
		hist("ffgen_operation_duration_seconds", esc, "M", "20", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)
	if got := buf.String(); got != want {
		t.Errorf("WritePrometheus mismatch\n got:\n%s\nwant:\n%s", got, want)
	}
}

// hist renders the expected lines of one histogram: cumulative counts for
// the 13 bounds and +Inf, then sum and count.
func hist(name, svc, method, sum string, cum ...int) string {
	les := []string{"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"}
	var b strings.Builder
	l := `service="` + svc + `",method="` + method + `"`
	for i, le := range les {
		b.WriteString(name + "_bucket{" + l + `,le="` + le + `"} ` + itoa(cum[i]) + "\n")
	}
	b.WriteString(name + "_sum{" + l + "} " + sum + "\n")
	b.WriteString(name + "_count{" + l + "} " + itoa(cum[len(cum)-1]) + "\n")
	return b.String()
}

func itoa(n int) string { return formatFloat(float64(n)) }

func TestStatsBucketBoundsInclusive(t *testing.T) {
	var h histogram
	h.observe(time.Millisecond)     // le="0.001": the bound is inclusive
	h.observe(time.Millisecond + 1) // next bucket
	h.observe(time.Hour)            // +Inf
	if h.counts[0].Load() != 1 || h.counts[1].Load() != 1 || h.counts[len(latencyBuckets)].Load() != 1 {
		t.Fatalf("bucket counts = %v %v %v", h.counts[0].Load(), h.counts[1].Load(), h.counts[len(latencyBuckets)].Load())
	}
}

func TestStatsUnknownReasonCounted(t *testing.T) {
	s := NewStats()
	s.Failover("s", "m", Reason(200))
	var buf bytes.Buffer
	if err := s.WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	last := Reason(numReasons - 1).String()
	if !strings.Contains(buf.String(), `ffgen_failovers_total{service="s",method="m",reason="`+last+`"} 1`) {
		t.Fatalf("unknown reason not counted in the last slot:\n%s", buf.String())
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
				s.AttemptEnded("svc", m, ReasonConnBroken, time.Duration(i)*time.Millisecond)
				s.Failover("svc", m, ReasonConnBroken)
				s.OperationEnded("svc", m, i%2 == 0, time.Millisecond)
				s.ServerAttempt("svc", m, -1)
			}
		})
		// Export while counting: must not race or tear.
		wg.Go(func() {
			var buf bytes.Buffer
			for range 5 {
				buf.Reset()
				if err := s.WritePrometheus(&buf); err != nil {
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
		failovers += ms.failovers[ReasonConnBroken].Load()
		ended += ms.attemptEnds[ReasonConnBroken].Load()
		if ms.clientInFlight.Load() != 0 || ms.serverInFlight.Load() != 0 {
			t.Errorf("in-flight gauges not back to zero: %d %d", ms.clientInFlight.Load(), ms.serverInFlight.Load())
		}
		var inHist uint64
		for i := range ms.opLatency.counts {
			inHist += ms.opLatency.counts[i].Load()
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
	allocs := testing.AllocsPerRun(100, func() {
		s.AttemptStarted("svc", "m")
		s.AttemptEnded("svc", "m", ReasonNone, time.Millisecond)
		s.Failover("svc", "m", ReasonDialFailed)
		s.OperationEnded("svc", "m", true, time.Millisecond)
		s.ServerAttempt("svc", "m", 1)
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
			s.AttemptEnded("bank.Accounts", "D", ReasonNone, 2*time.Millisecond)
		}
	})
}

func BenchmarkStatsWritePrometheus(b *testing.B) {
	s := NewStats()
	for _, m := range []string{"A", "B", "C", "D", "E", "F", "G", "H"} {
		s.OperationEnded("bank.Accounts", m, true, time.Millisecond)
		s.Failover("bank.Accounts", m, ReasonHeartbeatTimeout)
	}
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := s.WritePrometheus(&buf); err != nil {
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
	s.WatchTransport(fixedNodeStats{Conns: 3, BufferedBytes: 4096, RefusedConns: 7, FrameTimeouts: 2, TLSFailures: 1, IdleClosed: 5})
	var b strings.Builder
	if err := s.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ffgen_transport_connections 3\n",
		"ffgen_transport_buffered_bytes 4096\n",
		`ffgen_transport_refused_total{cause="conn-limit"} 7` + "\n",
		`ffgen_transport_refused_total{cause="frame-timeout"} 2` + "\n",
		`ffgen_transport_refused_total{cause="tls"} 1` + "\n",
		`ffgen_transport_refused_total{cause="buffer-limit"} 0` + "\n",
		"ffgen_transport_idle_closed_total 5\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("export lacks %q:\n%s", want, b.String())
		}
	}
}
