package cluster

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/tally"
)

// numReasons bounds the per-reason counters: every reason the runtime
// names, plus the last slot, where a reason outside them (a newer peer's)
// is counted rather than dropped.
var numReasons = func() int {
	n := 0
	for n < 255 && !strings.HasPrefix(runtime.Reason(n).String(), "reason(") {
		n++
	}
	return n + 1
}()

// Stats is the Metrics implementation that the management endpoint exports
// to Prometheus: it is a prometheus.Collector, so it also registers with any
// prometheus.Registerer. Counters live per service/method and are created on
// first use; after that every event is a few atomic adds with no lock and no
// allocation, and a scrape reads them. Create one with NewStats.
type Stats struct {
	// methods is copy-on-write: readers load the current map without a
	// lock, the rare first event of a method copies it under mu.
	methods   atomic.Pointer[map[methodKey]*methodStats]
	mu        sync.Mutex
	transport atomic.Pointer[NodeStatser] // see WatchTransport
	load      atomic.Pointer[Loader]      // see WatchLoad
	limiter   atomic.Pointer[Limiter]     // see WatchLimits
}

type methodKey struct{ service, method string }

type methodStats struct {
	attempts       atomic.Uint64
	attemptEnds    []atomic.Uint64 // by runtime.Reason; ReasonNone is a success
	failovers      []atomic.Uint64 // by runtime.Reason
	opsOK, opsErr  atomic.Uint64
	clientInFlight atomic.Int64 // attempts started and not ended
	attemptLatency tally.Histogram
	opLatency      tally.Histogram
	served         tally.Served // the server's side
}

// NewStats returns empty statistics.
func NewStats() *Stats {
	s := &Stats{}
	m := map[methodKey]*methodStats{}
	s.methods.Store(&m)
	return s
}

var _ runtime.Metrics = (*Stats)(nil)

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

func reasonSlot(r runtime.Reason) int { return min(int(r), numReasons-1) }

// AttemptStarted implements Metrics.
func (s *Stats) AttemptStarted(service, method string) {
	ms := s.get(service, method)
	ms.attempts.Add(1)
	ms.clientInFlight.Add(1)
}

// AttemptEnded implements Metrics.
func (s *Stats) AttemptEnded(service, method string, reason runtime.Reason, d time.Duration) {
	ms := s.get(service, method)
	ms.attemptEnds[reasonSlot(reason)].Add(1)
	ms.clientInFlight.Add(-1)
	ms.attemptLatency.Observe(d)
}

// Failover implements Metrics.
func (s *Stats) Failover(service, method string, reason runtime.Reason) {
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
	ms.opLatency.Observe(d)
}

// ServerAttempt implements Metrics.
func (s *Stats) ServerAttempt(service, method string, delta int) {
	s.get(service, method).served.Running.Add(int64(delta))
}

// Handled implements Metrics. A refusal ran no handler: it is counted,
// and has no latency.
func (s *Stats) Handled(service, method, status, code string, d time.Duration) {
	s.get(service, method).served.Handled(status, code, d)
}

// The families Stats exports; Describe and Collect share them.
var (
	descAttemptsStarted = prometheus.NewDesc("ffgen_attempts_started_total", "Attempts sent by the client.", methodLabelNames, nil)
	descAttemptsEnded   = prometheus.NewDesc("ffgen_attempts_ended_total", "Attempts ended on the client, by reason (none: the attempt produced the outcome).", reasonLabelNames, nil)
	descFailovers       = prometheus.NewDesc("ffgen_failovers_total", "Moves to another node, by reason.", reasonLabelNames, nil)
	descHeartbeatTOs    = prometheus.NewDesc("ffgen_heartbeat_timeouts_total", "Attempts abandoned because no heartbeat came within the heartbeat timeout.", methodLabelNames, nil)
	descOperations      = prometheus.NewDesc("ffgen_operations_total", "Operations ended on the client, by outcome.", []string{"service", "method", "outcome"}, nil)
	descClientInFlight  = prometheus.NewDesc("ffgen_client_attempts_in_flight", "Attempts the client has started and not ended.", methodLabelNames, nil)
	descAttemptLatency  = prometheus.NewDesc("ffgen_attempt_duration_seconds", "Attempt latency on the client.", methodLabelNames, nil)
	descOpLatency       = prometheus.NewDesc("ffgen_operation_duration_seconds", "Operation latency on the client, failovers included.", methodLabelNames, nil)

	methodLabelNames = []string{"service", "method"}
	reasonLabelNames = []string{"service", "method", "reason"}
)

var _ prometheus.Collector = (*Stats)(nil)

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAttemptsStarted, descAttemptsEnded, descFailovers, descHeartbeatTOs,
		descOperations, descClientInFlight, descAttemptLatency, descOpLatency} {
		ch <- d
	}
	describeServed(ch)
	describeTransport(ch)
	describeLoad(ch)
}

// Collect implements prometheus.Collector: the counters as they are at
// the scrape, read with atomic loads, no lock held against the hot path.
// Counters by reason list only reasons that occurred.
func (s *Stats) Collect(ch chan<- prometheus.Metric) { s.collect(ch, true) }

// collect exports the counters; the server's side only with served (a
// management handler that reads the server's own counters leaves them
// out, see clientSide).
func (s *Stats) collect(ch chan<- prometheus.Metric, served bool) {
	for k, ms := range *s.methods.Load() {
		svc, m := k.service, k.method
		ch <- prometheus.MustNewConstMetric(descAttemptsStarted, prometheus.CounterValue, float64(ms.attempts.Load()), svc, m)
		collectByReason(ch, descAttemptsEnded, ms.attemptEnds, svc, m)
		collectByReason(ch, descFailovers, ms.failovers, svc, m)
		ch <- prometheus.MustNewConstMetric(descHeartbeatTOs, prometheus.CounterValue, float64(ms.attemptEnds[runtime.ReasonHeartbeatTimeout].Load()), svc, m)
		ch <- prometheus.MustNewConstMetric(descOperations, prometheus.CounterValue, float64(ms.opsOK.Load()), svc, m, "ok")
		ch <- prometheus.MustNewConstMetric(descOperations, prometheus.CounterValue, float64(ms.opsErr.Load()), svc, m, "error")
		ch <- prometheus.MustNewConstMetric(descClientInFlight, prometheus.GaugeValue, float64(ms.clientInFlight.Load()), svc, m)
		ch <- histogramMetric(descAttemptLatency, &ms.attemptLatency, svc, m)
		ch <- histogramMetric(descOpLatency, &ms.opLatency, svc, m)
		if served {
			counts, sum := ms.served.Latency.Load()
			collectServed(ch, svc, m, ms.served.Running.Load(), ms.served.Answers.Each, counts[:], sum)
		}
	}
	if t := s.transport.Load(); t != nil {
		collectTransport(ch, (*t).NodeStats())
	}
	s.collectLoad(ch)
}

// clientSide is a Stats without the server's side, for a management
// handler that exports the server's own counts of it.
type clientSide struct{ s *Stats }

func (c clientSide) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAttemptsStarted, descAttemptsEnded, descFailovers, descHeartbeatTOs,
		descOperations, descClientInFlight, descAttemptLatency, descOpLatency} {
		ch <- d
	}
	describeTransport(ch)
}

func (c clientSide) Collect(ch chan<- prometheus.Metric) { c.s.collect(ch, false) }

func collectByReason(ch chan<- prometheus.Metric, d *prometheus.Desc, counts []atomic.Uint64, svc, m string) {
	for r := range counts {
		if n := counts[r].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), svc, m, runtime.Reason(r).String())
		}
	}
}

// histogramMetric exports h.
func histogramMetric(d *prometheus.Desc, h *tally.Histogram, labels ...string) prometheus.Metric {
	counts, sum := h.Load()
	return constHistogram(d, counts[:], sum, labels...)
}

// constHistogram exports per-bucket counts (the last above every bound).
// The count is derived from the buckets, so that it always equals the
// +Inf bucket.
func constHistogram(d *prometheus.Desc, counts []uint64, sum time.Duration, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(tally.LatencyBuckets))
	var cum uint64
	for i, n := range counts {
		cum += n
		if i < len(tally.LatencyBuckets) {
			buckets[tally.LatencyBuckets[i].Seconds()] = cum
		}
	}
	return prometheus.MustNewConstHistogram(d, cum, sum.Seconds(), buckets, labels...)
}
