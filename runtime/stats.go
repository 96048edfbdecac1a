package runtime

import (
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencyBuckets are the upper bounds of the latency histograms: fast
// failover lives in the low milliseconds, operation timeouts in seconds.
var latencyBuckets = [...]time.Duration{
	1 * time.Millisecond,
	2500 * time.Microsecond,
	5 * time.Millisecond,
	10 * time.Millisecond,
	25 * time.Millisecond,
	50 * time.Millisecond,
	100 * time.Millisecond,
	250 * time.Millisecond,
	500 * time.Millisecond,
	1 * time.Second,
	2500 * time.Millisecond,
	5 * time.Second,
	10 * time.Second,
}

// numReasons bounds the per-reason counters; a reason outside it (a newer
// peer's) is counted under the last slot rather than dropped.
var numReasons = len(reasonNames)

// Stats is the Metrics implementation that the management endpoint exports
// in the Prometheus text format. Counters live per service/method and are
// created on first use; after that every event is a few atomic adds with no
// lock and no allocation. Create one with NewStats.
type Stats struct {
	// methods is copy-on-write: readers load the current map without a
	// lock, the rare first event of a method copies it under mu.
	methods   atomic.Pointer[map[methodKey]*methodStats]
	mu        sync.Mutex
	transport atomic.Pointer[NodeStatser] // see WatchTransport
}

type methodKey struct{ service, method string }

type methodStats struct {
	attempts       atomic.Uint64
	attemptEnds    []atomic.Uint64 // by Reason; ReasonNone is a success
	failovers      []atomic.Uint64 // by Reason
	opsOK, opsErr  atomic.Uint64
	clientInFlight atomic.Int64 // attempts started and not ended
	serverInFlight atomic.Int64
	attemptLatency histogram
	opLatency      histogram
}

// histogram counts observations per bucket (not cumulative: each
// observation touches one bucket); the exporter accumulates.
type histogram struct {
	counts [len(latencyBuckets) + 1]atomic.Uint64 // the last is +Inf
	sumNs  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(latencyBuckets) && d > latencyBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// NewStats returns empty statistics.
func NewStats() *Stats {
	s := &Stats{}
	m := map[methodKey]*methodStats{}
	s.methods.Store(&m)
	return s
}

var _ Metrics = (*Stats)(nil)

func (s *Stats) get(service, method string) *methodStats {
	k := methodKey{service, method}
	if ms, ok := (*s.methods.Load())[k]; ok {
		return ms
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.methods.Load()
	if ms, ok := cur[k]; ok {
		return ms
	}
	ms := &methodStats{
		attemptEnds: make([]atomic.Uint64, numReasons),
		failovers:   make([]atomic.Uint64, numReasons),
	}
	next := maps.Clone(cur)
	next[k] = ms
	s.methods.Store(&next)
	return ms
}

func reasonSlot(r Reason) int { return min(int(r), numReasons-1) }

// AttemptStarted implements Metrics.
func (s *Stats) AttemptStarted(service, method string) {
	ms := s.get(service, method)
	ms.attempts.Add(1)
	ms.clientInFlight.Add(1)
}

// AttemptEnded implements Metrics.
func (s *Stats) AttemptEnded(service, method string, reason Reason, d time.Duration) {
	ms := s.get(service, method)
	ms.attemptEnds[reasonSlot(reason)].Add(1)
	ms.clientInFlight.Add(-1)
	ms.attemptLatency.observe(d)
}

// Failover implements Metrics.
func (s *Stats) Failover(service, method string, reason Reason) {
	s.get(service, method).failovers[reasonSlot(reason)].Add(1)
}

// OperationEnded implements Metrics.
func (s *Stats) OperationEnded(service, method string, ok bool, d time.Duration) {
	ms := s.get(service, method)
	if ok {
		ms.opsOK.Add(1)
	} else {
		ms.opsErr.Add(1)
	}
	ms.opLatency.observe(d)
}

// ServerAttempt implements Metrics.
func (s *Stats) ServerAttempt(service, method string, delta int) {
	s.get(service, method).serverInFlight.Add(int64(delta))
}

// WritePrometheus writes every metric in the Prometheus text exposition
// format 0.0.4. Series are sorted by service, method and reason, so the
// output is stable. Counters by reason only list reasons that occurred.
func (s *Stats) WritePrometheus(w io.Writer) error {
	cur := *s.methods.Load()
	keys := make([]methodKey, 0, len(cur))
	for k := range cur {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b methodKey) int {
		if c := strings.Compare(a.service, b.service); c != 0 {
			return c
		}
		return strings.Compare(a.method, b.method)
	})
	var p PromWriter
	p.Family("ffgen_attempts_started_total", "counter", "Attempts sent by the client.")
	for _, k := range keys {
		p.Sample("ffgen_attempts_started_total", methodLabels(k), float64(cur[k].attempts.Load()))
	}
	p.Family("ffgen_attempts_ended_total", "counter", "Attempts ended on the client, by reason (none: the attempt produced the outcome).")
	for _, k := range keys {
		writeByReason(&p, "ffgen_attempts_ended_total", k, cur[k].attemptEnds)
	}
	p.Family("ffgen_failovers_total", "counter", "Moves to another node, by reason.")
	for _, k := range keys {
		writeByReason(&p, "ffgen_failovers_total", k, cur[k].failovers)
	}
	p.Family("ffgen_heartbeat_timeouts_total", "counter", "Attempts abandoned because no heartbeat came within the heartbeat timeout.")
	for _, k := range keys {
		p.Sample("ffgen_heartbeat_timeouts_total", methodLabels(k), float64(cur[k].attemptEnds[ReasonHeartbeatTimeout].Load()))
	}
	p.Family("ffgen_operations_total", "counter", "Operations ended on the client, by outcome.")
	for _, k := range keys {
		p.Sample("ffgen_operations_total", append(methodLabels(k), "outcome", "ok"), float64(cur[k].opsOK.Load()))
		p.Sample("ffgen_operations_total", append(methodLabels(k), "outcome", "error"), float64(cur[k].opsErr.Load()))
	}
	p.Family("ffgen_client_attempts_in_flight", "gauge", "Attempts the client has started and not ended.")
	for _, k := range keys {
		p.Sample("ffgen_client_attempts_in_flight", methodLabels(k), float64(cur[k].clientInFlight.Load()))
	}
	p.Family("ffgen_server_attempts_in_flight", "gauge", "Handlers running on the server.")
	for _, k := range keys {
		p.Sample("ffgen_server_attempts_in_flight", methodLabels(k), float64(cur[k].serverInFlight.Load()))
	}
	p.Family("ffgen_attempt_duration_seconds", "histogram", "Attempt latency on the client.")
	for _, k := range keys {
		writeHistogram(&p, "ffgen_attempt_duration_seconds", k, &cur[k].attemptLatency)
	}
	p.Family("ffgen_operation_duration_seconds", "histogram", "Operation latency on the client, failovers included.")
	for _, k := range keys {
		writeHistogram(&p, "ffgen_operation_duration_seconds", k, &cur[k].opLatency)
	}
	if t := s.transport.Load(); t != nil {
		writeTransport(&p, (*t).NodeStats())
	}
	_, err := w.Write(p.Bytes())
	return err
}

// methodLabels returns the service and method labels with room for one
// more pair, so that callers append without reallocating.
func methodLabels(k methodKey) []string {
	return append(make([]string, 0, 6), "service", k.service, "method", k.method)
}

func writeByReason(p *PromWriter, name string, k methodKey, counts []atomic.Uint64) {
	for r := range counts {
		if n := counts[r].Load(); n > 0 {
			p.Sample(name, append(methodLabels(k), "reason", Reason(r).String()), float64(n))
		}
	}
}

func writeHistogram(p *PromWriter, name string, k methodKey, h *histogram) {
	// Load the buckets first and derive the count from them, so the
	// exported count always equals the +Inf bucket.
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		le := "+Inf"
		if i < len(latencyBuckets) {
			le = formatFloat(latencyBuckets[i].Seconds())
		}
		p.Sample(name+"_bucket", append(methodLabels(k), "le", le), float64(cum))
	}
	p.Sample(name+"_sum", methodLabels(k), time.Duration(h.sumNs.Load()).Seconds())
	p.Sample(name+"_count", methodLabels(k), float64(cum))
}

// PromWriter builds Prometheus text exposition format 0.0.4. It is exported
// so that other exporters (cluster membership gauges) share the escaping.
type PromWriter struct {
	buf []byte
}

// Family writes the HELP and TYPE lines of a metric family.
func (p *PromWriter) Family(name, typ, help string) {
	p.buf = append(p.buf, "# HELP "...)
	p.buf = append(p.buf, name...)
	p.buf = append(p.buf, ' ')
	p.buf = append(p.buf, helpEscaper.Replace(help)...)
	p.buf = append(p.buf, "\n# TYPE "...)
	p.buf = append(p.buf, name...)
	p.buf = append(p.buf, ' ')
	p.buf = append(p.buf, typ...)
	p.buf = append(p.buf, '\n')
}

// Sample writes one sample; labels alternate names and values.
func (p *PromWriter) Sample(name string, labels []string, v float64) {
	p.buf = append(p.buf, name...)
	if len(labels) > 0 {
		p.buf = append(p.buf, '{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				p.buf = append(p.buf, ',')
			}
			p.buf = append(p.buf, labels[i]...)
			p.buf = append(p.buf, `="`...)
			p.buf = append(p.buf, labelEscaper.Replace(labels[i+1])...)
			p.buf = append(p.buf, '"')
		}
		p.buf = append(p.buf, '}')
	}
	p.buf = append(p.buf, ' ')
	p.buf = appendFloat(p.buf, v)
	p.buf = append(p.buf, '\n')
}

// Bytes returns the text written so far.
func (p *PromWriter) Bytes() []byte { return p.buf }

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// appendFloat writes integers (every counter) without an exponent.
func appendFloat(b []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.AppendInt(b, int64(f), 10)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

func formatFloat(f float64) string { return string(appendFloat(nil, f)) }
