package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime"
)

// Loader reports what a server holds against its admission limits;
// *runtime.Server is one.
type Loader interface {
	Load() runtime.Load
}

// Limiter reports a client's adaptive limits, one per node;
// *runtime.Client is one.
type Limiter interface {
	Limits() []runtime.PeerLimit
}

// WatchLoad adds the server's queue depth and its limits to what Stats
// exports (ffgen_server_pending, ffgen_server_pending_limit,
// ffgen_server_queued, ffgen_server_queued_limit,
// ffgen_server_queue_delay_seconds,
// ffgen_server_queue_delay_limit_seconds).
func (s *Stats) WatchLoad(l Loader) { s.load.Store(&l) }

// WatchLimits adds the client's limit to each node, the attempts in
// flight under it and those waiting for a slot to what Stats exports
// (ffgen_client_limit, ffgen_client_limit_in_flight,
// ffgen_client_limit_waiting).
func (s *Stats) WatchLimits(l Limiter) { s.limiter.Store(&l) }

var (
	descPending      = prometheus.NewDesc("ffgen_server_pending", "Operations queued or running on the server: what its admission limit (ServerConfig.MaxPending) counts.", nil, nil)
	descPendingLimit = prometheus.NewDesc("ffgen_server_pending_limit", "ServerConfig.MaxPending; attempts beyond it are refused with ffgen.overloaded (ffgen_server_handled_total{status=\"refused\"}).", nil, nil)
	descQueued       = prometheus.NewDesc("ffgen_server_queued", "Operations waiting to start on the server (queued behind their entities, or for the replicated log): what ServerConfig.MaxQueued counts.", nil, nil)
	descQueuedLimit  = prometheus.NewDesc("ffgen_server_queued_limit", "ServerConfig.MaxQueued; attempts beyond it are refused with ffgen.overloaded (ffgen_server_handled_total{status=\"refused\"}).", nil, nil)
	descQueueDelay   = prometheus.NewDesc("ffgen_server_queue_delay_seconds", "The median time the operations that started on the server in the last 100 ms waited to start.", nil, nil)
	descDelayLimit   = prometheus.NewDesc("ffgen_server_queue_delay_limit_seconds", "The unloaded wait to start plus ServerConfig.QueueDelay: past it a queue stands, and attempts beyond what the server starts in that time are refused with ffgen.overloaded.", nil, nil)
	descClientLimit  = prometheus.NewDesc("ffgen_client_limit", "The client's adaptive limit on the attempts in flight to a node.", []string{"peer"}, nil)
	descLimitFlight  = prometheus.NewDesc("ffgen_client_limit_in_flight", "Attempts in flight to a node under the client's limit.", []string{"peer"}, nil)
	descLimitWaiting = prometheus.NewDesc("ffgen_client_limit_waiting", "Attempts waiting on the client for a slot of its limit to a node.", []string{"peer"}, nil)
	descLimitDrops   = prometheus.NewDesc("ffgen_client_limit_decreases_total", "Decreases of the client's limit to a node, by the sign that lowered it: refused (for overload), timeout (heartbeat or attempt), slow (an answer judged slow).", []string{"peer", "sign"}, nil)
)

func describeLoad(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descPendingLimit
	ch <- descQueued
	ch <- descQueuedLimit
	ch <- descQueueDelay
	ch <- descDelayLimit
	ch <- descClientLimit
	ch <- descLimitFlight
	ch <- descLimitWaiting
	ch <- descLimitDrops
}

func (s *Stats) collectLoad(ch chan<- prometheus.Metric) {
	if l := s.load.Load(); l != nil {
		ld := (*l).Load()
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(ld.Pending))
		ch <- prometheus.MustNewConstMetric(descPendingLimit, prometheus.GaugeValue, float64(ld.MaxPending))
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(ld.Queued))
		ch <- prometheus.MustNewConstMetric(descQueuedLimit, prometheus.GaugeValue, float64(ld.MaxQueued))
		ch <- prometheus.MustNewConstMetric(descQueueDelay, prometheus.GaugeValue, ld.QueueDelay.Seconds())
		ch <- prometheus.MustNewConstMetric(descDelayLimit, prometheus.GaugeValue, ld.QueueDelayLimit.Seconds())
	}
	if l := s.limiter.Load(); l != nil {
		for _, p := range (*l).Limits() {
			ch <- prometheus.MustNewConstMetric(descClientLimit, prometheus.GaugeValue, float64(p.Limit), p.Node)
			ch <- prometheus.MustNewConstMetric(descLimitFlight, prometheus.GaugeValue, float64(p.InFlight), p.Node)
			ch <- prometheus.MustNewConstMetric(descLimitWaiting, prometheus.GaugeValue, float64(p.Waiting), p.Node)
			ch <- prometheus.MustNewConstMetric(descLimitDrops, prometheus.CounterValue, float64(p.Decreases.Refused), p.Node, "refused")
			ch <- prometheus.MustNewConstMetric(descLimitDrops, prometheus.CounterValue, float64(p.Decreases.TimedOut), p.Node, "timeout")
			ch <- prometheus.MustNewConstMetric(descLimitDrops, prometheus.CounterValue, float64(p.Decreases.Slow), p.Node, "slow")
		}
	}
}
