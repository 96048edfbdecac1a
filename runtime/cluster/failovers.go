package cluster

import (
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime"
)

// Failovers that clients saw, for the operator: a node counts those of the
// clients in its own process (its *Cluster is their membership), and a
// thin client (its *Follower) sends its counts on each read of the
// membership, so that the page of the node it reads from shows them. A
// failover is often seen by nobody else: the node it left may be frozen,
// or fine and merely slow to answer that one client.

// FailoversHeader carries a thin client's failover counts, cumulative
// since it started, on its reads of /cluster/members: its name, a space,
// then service/method/reason=count entries separated by commas, each name
// query-escaped.
const FailoversHeader = "Ffgen-Client-Failovers"

type failoverKey struct{ service, method, reason string }

// failoverCounts counts one process's failovers. Failovers are rare: a
// lock and a map are cheap enough.
type failoverCounts struct {
	mu sync.Mutex
	n  map[failoverKey]uint64
}

func (f *failoverCounts) add(service, method string, r runtime.Reason) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = make(map[failoverKey]uint64)
	}
	if len(f.n) < maxFailoverKinds {
		f.n[failoverKey{service, method, r.String()}]++
	}
}

func (f *failoverCounts) snapshot() map[failoverKey]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.n)
}

// maxFailoverKinds bounds the kinds counted, sent and kept per client.
const maxFailoverKinds = 256

// header encodes the counts for FailoversHeader, "" if there are none.
func (f *failoverCounts) header(name string) string {
	counts := f.snapshot()
	if len(counts) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(url.QueryEscape(name))
	sep := " "
	for k, n := range counts {
		fmt.Fprintf(&b, "%s%s/%s/%s=%d", sep, url.QueryEscape(k.service), url.QueryEscape(k.method), url.QueryEscape(k.reason), n)
		sep = ","
	}
	return b.String()
}

// parseFailovers decodes a FailoversHeader value.
func parseFailovers(v string) (string, map[failoverKey]uint64, error) {
	name, list, ok := strings.Cut(v, " ")
	if !ok {
		return "", nil, fmt.Errorf("%s: no counts", FailoversHeader)
	}
	name, err := url.QueryUnescape(name)
	if err != nil || name == "" {
		return "", nil, fmt.Errorf("%s: bad client name", FailoversHeader)
	}
	out := make(map[failoverKey]uint64)
	for _, e := range strings.Split(list, ",") {
		key, count, ok := strings.Cut(e, "=")
		parts := strings.Split(key, "/")
		n, err := strconv.ParseUint(count, 10, 64)
		if !ok || len(parts) != 3 || err != nil || len(out) >= maxFailoverKinds {
			return "", nil, fmt.Errorf("%s: bad entry %q", FailoversHeader, e)
		}
		for i := range parts {
			if parts[i], err = url.QueryUnescape(parts[i]); err != nil {
				return "", nil, fmt.Errorf("%s: bad entry %q", FailoversHeader, e)
			}
		}
		out[failoverKey{parts[0], parts[1], parts[2]}] = n
	}
	return name, out, nil
}

// failoverReports keeps what thin clients reported to this node, the
// latest counts of each, until it has not heard from one for reportTTL.
type failoverReports struct {
	mu      sync.Mutex
	clients map[string]clientReport
}

type clientReport struct {
	counts map[failoverKey]uint64
	seen   time.Time
}

const (
	reportTTL  = 10 * time.Minute
	maxReports = 1000 // clients kept at once
)

// take records a FailoversHeader value; a malformed one is ignored, as a
// report is only for the operator's eyes.
func (r *failoverReports) take(v string, now time.Time) {
	name, counts, err := parseFailovers(v)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clients == nil {
		r.clients = make(map[string]clientReport)
	}
	for c, rep := range r.clients {
		if now.Sub(rep.seen) > reportTTL {
			delete(r.clients, c)
		}
	}
	if _, known := r.clients[name]; known || len(r.clients) < maxReports {
		r.clients[name] = clientReport{counts: counts, seen: now}
	}
}

var descReportedFailovers = prometheus.NewDesc("ffgen_client_failovers_reported_total",
	"Failovers seen by clients, by client: this node's own (client \"local\") and thin clients that read the membership from it.",
	[]string{"client", "service", "method", "reason"}, nil)

// failoverCollector exports the failovers of the node's own clients and
// those reported to it.
type failoverCollector struct {
	local   *failoverCounts // nil: the membership is not a *Cluster
	reports *failoverReports
}

func (failoverCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descReportedFailovers }

func (c failoverCollector) Collect(ch chan<- prometheus.Metric) {
	emit := func(client string, counts map[failoverKey]uint64) {
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(descReportedFailovers, prometheus.CounterValue, float64(n), client, k.service, k.method, k.reason)
		}
	}
	if c.local != nil {
		emit("local", c.local.snapshot())
	}
	c.reports.mu.Lock()
	defer c.reports.mu.Unlock()
	for name, rep := range c.reports.clients {
		if name != "local" {
			emit(name, rep.counts)
		}
	}
}
