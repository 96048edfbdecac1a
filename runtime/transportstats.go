package runtime

import "github.com/ffgen/ffgen/runtime/transport"

// NodeStatser is a transport that counts the connections and buffers it
// holds and what it refused; *transport.TCP is one.
type NodeStatser interface {
	NodeStats() transport.NodeStats
}

// WatchTransport adds t's counters to what WritePrometheus writes, as the
// ffgen_transport_* families.
func (s *Stats) WatchTransport(t NodeStatser) { s.transport.Store(&t) }

func writeTransport(p *PromWriter, st transport.NodeStats) {
	p.Family("ffgen_transport_connections", "gauge", "Accepted connections open or in their handshake.")
	p.Sample("ffgen_transport_connections", nil, float64(st.Conns))
	p.Family("ffgen_transport_buffered_bytes", "gauge", "Bytes held for frames larger than a connection's base read buffer.")
	p.Sample("ffgen_transport_buffered_bytes", nil, float64(st.BufferedBytes))
	p.Family("ffgen_transport_refused_total", "counter", "Connections refused or closed for cause, by cause.")
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
	} {
		p.Sample("ffgen_transport_refused_total", []string{"cause", c.cause}, float64(c.n))
	}
	p.Family("ffgen_transport_idle_closed_total", "counter", "Connections closed after the idle timeout.")
	p.Sample("ffgen_transport_idle_closed_total", nil, float64(st.IdleClosed))
}
