package cluster

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime"
)

// The families of the server's side of every call: Stats exports them from
// what it was told, and a management handler from the server's own counts
// (ServedSource), which every server keeps.
var (
	descServerInFlight = prometheus.NewDesc("ffgen_server_attempts_in_flight", "Handlers running on the server.", methodLabelNames, nil)
	descHandled        = prometheus.NewDesc("ffgen_server_handled_total", "Handler runs ended on the server, by the answer's status (ok, fail, failover, forwarded) and error code (declared, ffgen.* for the engine's, undeclared); status refused counts attempts refused without running anything.", []string{"service", "method", "status", "code"}, nil)
	descHandlerLatency = prometheus.NewDesc("ffgen_server_handler_duration_seconds", "How long handlers ran on the server.", methodLabelNames, nil)
)

func describeServed(ch chan<- *prometheus.Desc) {
	ch <- descServerInFlight
	ch <- descHandled
	ch <- descHandlerLatency
}

// collectServed exports one method's server side: handlers running, answers
// by status and code (each listed by answers), handler latency.
func collectServed(ch chan<- prometheus.Metric, svc, m string, running int64,
	answers func(func(status, code string, n uint64)), latency []uint64, sum time.Duration) {
	ch <- prometheus.MustNewConstMetric(descServerInFlight, prometheus.GaugeValue, float64(running), svc, m)
	answers(func(status, code string, n uint64) {
		ch <- prometheus.MustNewConstMetric(descHandled, prometheus.CounterValue, float64(n), svc, m, status, code)
	})
	ch <- constHistogram(descHandlerLatency, latency, sum, svc, m)
}

// ServedSource reports what a server served, counted by the server itself
// whatever Metrics it was given; *runtime.Server is one. A management
// handler finds it among ManagementConfig.Replicas and Ops.
type ServedSource interface {
	Served() []runtime.MethodServed
}

// servedCollector exports the server's own counts.
type servedCollector []ServedSource

func (servedCollector) Describe(ch chan<- *prometheus.Desc) { describeServed(ch) }

// Collect exports one series per method: the servers of one process (an
// in-memory cluster, a test) that serve the same method are summed.
func (c servedCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ service, method string }
	var order []key
	sums := map[key]*runtime.MethodServed{}
	for _, src := range c {
		for _, ms := range src.Served() {
			k := key{ms.Service, ms.Method}
			sum := sums[k]
			if sum == nil {
				sum = &runtime.MethodServed{Service: ms.Service, Method: ms.Method, Latency: make([]uint64, len(ms.Latency))}
				sums[k] = sum
				order = append(order, k)
			}
			sum.Running += ms.Running
			sum.LatencySum += ms.LatencySum
			for i, n := range ms.Latency {
				sum.Latency[i] += n
			}
			for _, a := range ms.Answers {
				i := slices.IndexFunc(sum.Answers, func(b runtime.AnswerCount) bool { return b.Status == a.Status && b.Code == a.Code })
				if i < 0 {
					sum.Answers = append(sum.Answers, runtime.AnswerCount{Status: a.Status, Code: a.Code})
					i = len(sum.Answers) - 1
				}
				sum.Answers[i].N += a.N
			}
		}
	}
	for _, k := range order {
		ms := sums[k]
		collectServed(ch, ms.Service, ms.Method, ms.Running, func(f func(status, code string, n uint64)) {
			for _, a := range ms.Answers {
				f(a.Status, a.Code, a.N)
			}
		}, ms.Latency, ms.LatencySum)
	}
}

// servedSources finds the servers among what cfg was given, each once.
func servedSources(cfg ManagementConfig) servedCollector {
	var out servedCollector
	add := func(v any) {
		src, ok := v.(ServedSource)
		if !ok {
			return
		}
		for _, have := range out {
			if have == src {
				return
			}
		}
		out = append(out, src)
	}
	if cfg.Replicas != nil {
		add(cfg.Replicas)
	}
	for _, o := range cfg.Ops {
		add(o)
	}
	return out
}
