package cluster

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime"
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
	serverInFlight atomic.Int64
	attemptLatency histogram
	opLatency      histogram
	handlerLatency histogram

	mu          sync.Mutex                      // serializes additions to handledList
	handledList atomic.Pointer[[]*handledCount] // server answers by status and code
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
	ms.attemptLatency.observe(d)
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
	ms.opLatency.observe(d)
}

// ServerAttempt implements Metrics.
func (s *Stats) ServerAttempt(service, method string, delta int) {
	s.get(service, method).serverInFlight.Add(int64(delta))
}

// Handled implements Metrics. A refusal ran no handler: it is counted,
// and has no latency.
func (s *Stats) Handled(service, method, status, code string, d time.Duration) {
	ms := s.get(service, method)
	ms.handled(status, code).Add(1)
	if status != "refused" {
		ms.handlerLatency.observe(d)
	}
}

// handled returns the counter of one status and code: a lookup in a short
// copy-on-write list (a method has a few declared codes), so counting takes
// no lock and no allocation after the first of its kind.
func (ms *methodStats) handled(status, code string) *atomic.Uint64 {
	if l := ms.handledList.Load(); l != nil {
		for _, h := range *l {
			if h.status == status && h.code == code {
				return &h.n
			}
		}
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var cur []*handledCount
	if l := ms.handledList.Load(); l != nil {
		cur = *l
	}
	for _, h := range cur {
		if h.status == status && h.code == code {
			return &h.n
		}
	}
	h := &handledCount{status: status, code: code}
	next := append(slices.Clip(cur), h)
	ms.handledList.Store(&next)
	return &h.n
}

type handledCount struct {
	status, code string
	n            atomic.Uint64
}

// The families Stats exports; Describe and Collect share them.
var (
	descAttemptsStarted = prometheus.NewDesc("ffgen_attempts_started_total", "Attempts sent by the client.", methodLabelNames, nil)
	descAttemptsEnded   = prometheus.NewDesc("ffgen_attempts_ended_total", "Attempts ended on the client, by reason (none: the attempt produced the outcome).", reasonLabelNames, nil)
	descFailovers       = prometheus.NewDesc("ffgen_failovers_total", "Moves to another node, by reason.", reasonLabelNames, nil)
	descHeartbeatTOs    = prometheus.NewDesc("ffgen_heartbeat_timeouts_total", "Attempts abandoned because no heartbeat came within the heartbeat timeout.", methodLabelNames, nil)
	descOperations      = prometheus.NewDesc("ffgen_operations_total", "Operations ended on the client, by outcome.", []string{"service", "method", "outcome"}, nil)
	descClientInFlight  = prometheus.NewDesc("ffgen_client_attempts_in_flight", "Attempts the client has started and not ended.", methodLabelNames, nil)
	descServerInFlight  = prometheus.NewDesc("ffgen_server_attempts_in_flight", "Handlers running on the server.", methodLabelNames, nil)
	descAttemptLatency  = prometheus.NewDesc("ffgen_attempt_duration_seconds", "Attempt latency on the client.", methodLabelNames, nil)
	descOpLatency       = prometheus.NewDesc("ffgen_operation_duration_seconds", "Operation latency on the client, failovers included.", methodLabelNames, nil)
	descHandled         = prometheus.NewDesc("ffgen_server_handled_total", "Handler runs ended on the server, by the answer's status (ok, fail, failover, forwarded) and error code (declared, ffgen.* for the engine's, undeclared); status refused counts attempts refused without running anything.", []string{"service", "method", "status", "code"}, nil)
	descHandlerLatency  = prometheus.NewDesc("ffgen_server_handler_duration_seconds", "How long handlers ran on the server.", methodLabelNames, nil)

	methodLabelNames = []string{"service", "method"}
	reasonLabelNames = []string{"service", "method", "reason"}
)

var _ prometheus.Collector = (*Stats)(nil)

// Describe implements prometheus.Collector.
func (s *Stats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAttemptsStarted, descAttemptsEnded, descFailovers, descHeartbeatTOs,
		descOperations, descClientInFlight, descServerInFlight, descAttemptLatency, descOpLatency, descHandled, descHandlerLatency} {
		ch <- d
	}
	describeTransport(ch)
	describeLoad(ch)
}

// Collect implements prometheus.Collector: the counters as they are at
// the scrape, read with atomic loads, no lock held against the hot path.
// Counters by reason list only reasons that occurred.
func (s *Stats) Collect(ch chan<- prometheus.Metric) {
	for k, ms := range *s.methods.Load() {
		svc, m := k.service, k.method
		ch <- prometheus.MustNewConstMetric(descAttemptsStarted, prometheus.CounterValue, float64(ms.attempts.Load()), svc, m)
		collectByReason(ch, descAttemptsEnded, ms.attemptEnds, svc, m)
		collectByReason(ch, descFailovers, ms.failovers, svc, m)
		ch <- prometheus.MustNewConstMetric(descHeartbeatTOs, prometheus.CounterValue, float64(ms.attemptEnds[runtime.ReasonHeartbeatTimeout].Load()), svc, m)
		ch <- prometheus.MustNewConstMetric(descOperations, prometheus.CounterValue, float64(ms.opsOK.Load()), svc, m, "ok")
		ch <- prometheus.MustNewConstMetric(descOperations, prometheus.CounterValue, float64(ms.opsErr.Load()), svc, m, "error")
		ch <- prometheus.MustNewConstMetric(descClientInFlight, prometheus.GaugeValue, float64(ms.clientInFlight.Load()), svc, m)
		ch <- prometheus.MustNewConstMetric(descServerInFlight, prometheus.GaugeValue, float64(ms.serverInFlight.Load()), svc, m)
		ch <- ms.attemptLatency.metric(descAttemptLatency, svc, m)
		ch <- ms.opLatency.metric(descOpLatency, svc, m)
		if l := ms.handledList.Load(); l != nil {
			for _, h := range *l {
				ch <- prometheus.MustNewConstMetric(descHandled, prometheus.CounterValue, float64(h.n.Load()), svc, m, h.status, h.code)
			}
		}
		ch <- ms.handlerLatency.metric(descHandlerLatency, svc, m)
	}
	if t := s.transport.Load(); t != nil {
		collectTransport(ch, (*t).NodeStats())
	}
	s.collectLoad(ch)
}

func collectByReason(ch chan<- prometheus.Metric, d *prometheus.Desc, counts []atomic.Uint64, svc, m string) {
	for r := range counts {
		if n := counts[r].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), svc, m, runtime.Reason(r).String())
		}
	}
}

// metric exports h. The buckets are loaded first and the count derived
// from them, so the exported count always equals the +Inf bucket.
func (h *histogram) metric(d *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(latencyBuckets))
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		if i < len(latencyBuckets) {
			buckets[latencyBuckets[i].Seconds()] = cum
		}
	}
	return prometheus.MustNewConstHistogram(d, cum, time.Duration(h.sumNs.Load()).Seconds(), buckets, labels...)
}
