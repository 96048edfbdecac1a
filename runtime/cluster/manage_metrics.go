package cluster

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/ffgen/ffgen/runtime"
)

// gatherer collects /metrics from a registry of its own (not
// prometheus.DefaultRegisterer: two management handlers in one process,
// as tests and tools make, must not collide): the Go runtime and process
// collectors every operator's dashboards assume, the membership, the
// replicas, the operations in flight, the failovers clients saw, what the
// server counted of the calls it served (from the *runtime.Server among
// Replicas and Ops, in place of a Stats's copy of the same), cfg.Metrics,
// and cfg.Gatherer's families beside them.
func gatherer(cfg ManagementConfig, reports *failoverReports) (prometheus.Gatherer, error) {
	reg := prometheus.NewRegistry()
	fc := failoverCollector{reports: reports}
	if c, ok := cfg.Members.(*Cluster); ok {
		fc.local = &c.failovers
	}
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		memberCollector{cfg.Members},
		fc,
	}
	if cfg.Replicas != nil {
		cs = append(cs, replicaCollector{cfg.Replicas})
	}
	cs = append(cs, opsCollector(cfg.Ops))
	metrics := cfg.Metrics
	if served := servedSources(cfg); len(served) > 0 {
		// The server's own counts of what it served: the same families
		// a Stats exports, whether or not the server has one.
		cs = append(cs, served)
		if st, ok := metrics.(*Stats); ok {
			metrics = clientSide{st}
		}
	}
	if metrics != nil {
		cs = append(cs, metrics)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("cluster: ManagementConfig.Metrics: %w", err)
		}
	}
	if cfg.Gatherer != nil {
		return prometheus.Gatherers{reg, cfg.Gatherer}, nil
	}
	return reg, nil
}

// metrics serves the families in the format the scraper asks for (text
// 0.0.4 unless it accepts another). It does what promhttp does, except
// that a collection error is the JSON error every route answers, and
// nothing is served half.
func (m *management) metrics(w http.ResponseWriter, r *http.Request) {
	mfs, err := m.gatherer.Gather()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "metrics: "+err.Error())
		return
	}
	var buf bytes.Buffer
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			writeError(w, http.StatusInternalServerError, "metrics: "+err.Error())
			return
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		c.Close()
	}
	w.Header().Set("Content-Type", string(format))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

var descMembers = prometheus.NewDesc("ffgen_cluster_members", "Cluster members known to this node, by state.", []string{"state"}, nil)

// memberCollector counts members by state, every state listed.
type memberCollector struct{ src MemberSource }

func (memberCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descMembers }

func (c memberCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[State]int{}
	for _, s := range c.src.AllMembers() {
		counts[s.State]++
	}
	for _, st := range []State{StateAlive, StateSuspect, StateLeaving, StateDead, StateLeft} {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}

// replicaFamilies export each replicated service's state, read at scrape
// time from what the replica already keeps.
var replicaFamilies = []struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(st runtime.ReplicaStatus) float64
}{
	{replicaDesc("ffgen_replica_ready", "1 when the node serves the replicated service, 0 while it joins, catches up, knows no leader, stopped applying, or drains."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return b2f(st.Ready) }},
	{replicaDesc("ffgen_replica_stopped", "1 once the node met a write it cannot apply: it applies nothing after it until it restarts."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return b2f(st.Stopped) }},
	{replicaDesc("ffgen_replica_leading", "1 when this node is the raft leader of the service."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return b2f(st.Leading) }},
	{replicaDesc("ffgen_replica_voter", "1 when this node is a voter of the service's raft group (0: a learner, or not in the group)."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return b2f(st.Role == "voter") }},
	{replicaDesc("ffgen_replica_term", "The raft term this node knows."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return float64(st.Term) }},
	{replicaDesc("ffgen_replica_commit_index", "Highest log index known to be committed."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return float64(st.Commit) }},
	{replicaDesc("ffgen_replica_applied_index", "Highest log index applied on this node."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return float64(st.Applied) }},
	{replicaDesc("ffgen_replica_voters", "Voters in the service's raft group, as this node knows them."), prometheus.GaugeValue, func(st runtime.ReplicaStatus) float64 { return float64(len(st.Voters)) }},
	{replicaDesc("ffgen_replica_snapshots_installed_total", "Snapshots installed from the leader."), prometheus.CounterValue, func(st runtime.ReplicaStatus) float64 { return float64(st.SnapshotsInstalled) }},
}

func replicaDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"service"}, nil)
}

type replicaCollector struct{ src ReplicaSource }

func (replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range replicaFamilies {
		ch <- f.desc
	}
}

func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	sts := c.src.Replication()
	for _, f := range replicaFamilies {
		for _, st := range sts {
			ch <- prometheus.MustNewConstMetric(f.desc, f.typ, f.value(st), st.Service)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var descServerOps = prometheus.NewDesc("ffgen_server_operations", "Operations on this server by state: queued behind their entities (the queue depth), held aside until their entity is idle (//ff:hold), or running.", []string{"state"}, nil)

// opsCollector counts the server's operations by state from the same lists
// /ops serves, every state listed so that a series does not vanish at 0.
type opsCollector []runtime.InFlighter

func (opsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descServerOps }

func (c opsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{}
	for _, src := range c {
		for _, op := range src.InFlight() {
			if op.Side == "server" {
				counts[op.State]++
			}
		}
	}
	for _, st := range []string{"queued", "held", "running"} {
		ch <- prometheus.MustNewConstMetric(descServerOps, prometheus.GaugeValue, float64(counts[st]), st)
	}
}
