package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime/transport"
)

// NodeStatser is a transport that counts the connections and buffers it
// holds and what it refused; *transport.TCP is one.
type NodeStatser interface {
	NodeStats() transport.NodeStats
}

// WatchTransport adds t's counters to what Stats exports, as the
// ffgen_transport_* families.
func (s *Stats) WatchTransport(t NodeStatser) { s.transport.Store(&t) }

var (
	descTransportConns    = prometheus.NewDesc("ffgen_transport_connections", "Accepted connections open or in their handshake.", nil, nil)
	descTransportBuffered = prometheus.NewDesc("ffgen_transport_buffered_bytes", "Bytes held for frames larger than a connection's base read buffer.", nil, nil)
	descTransportRefused  = prometheus.NewDesc("ffgen_transport_refused_total", "Connections refused or closed for cause, by cause.", []string{"cause"}, nil)
	descTransportIdle     = prometheus.NewDesc("ffgen_transport_idle_closed_total", "Connections closed after the idle timeout.", nil, nil)
	descTransportShakes   = prometheus.NewDesc("ffgen_transport_handshakes", "Accepted connections in their TLS and Hello exchange.", nil, nil)
	descTransportPaced    = prometheus.NewDesc("ffgen_transport_paced_total", "Times accepting paused: every handshake slot taken, or the accept rate reached.", nil, nil)
)

func describeTransport(ch chan<- *prometheus.Desc) {
	ch <- descTransportConns
	ch <- descTransportBuffered
	ch <- descTransportRefused
	ch <- descTransportIdle
	ch <- descTransportShakes
	ch <- descTransportPaced
}

func collectTransport(ch chan<- prometheus.Metric, st transport.NodeStats) {
	ch <- prometheus.MustNewConstMetric(descTransportConns, prometheus.GaugeValue, float64(st.Conns))
	ch <- prometheus.MustNewConstMetric(descTransportBuffered, prometheus.GaugeValue, float64(st.BufferedBytes))
	for _, c := range []struct {
		cause string
		n     uint64
	}{
		{"conn-limit", st.RefusedConns},
		{"buffer-limit", st.BufferLimit},
		{"frame-timeout", st.FrameTimeouts},
		{"handshake", st.HandshakeFailures},
		{"tls", st.TLSFailures},
		{"bad-frame", st.BadFrames},
		{"handshake-limit", st.HandshakeLimit},
		{"accept-rate", st.AcceptRateLimit},
	} {
		ch <- prometheus.MustNewConstMetric(descTransportRefused, prometheus.CounterValue, float64(c.n), c.cause)
	}
	ch <- prometheus.MustNewConstMetric(descTransportIdle, prometheus.CounterValue, float64(st.IdleClosed))
	ch <- prometheus.MustNewConstMetric(descTransportShakes, prometheus.GaugeValue, float64(st.Handshakes))
	ch <- prometheus.MustNewConstMetric(descTransportPaced, prometheus.CounterValue, float64(st.Paced))
}
