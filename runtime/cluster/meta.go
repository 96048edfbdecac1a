package cluster

import (
	"errors"
	"fmt"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/hashicorp/memberlist"
)

// metaVersion leads the node metadata so that the format can evolve; a
// node ignores peers whose metadata it cannot read.
const metaVersion = 1

// ErrMetaTooLarge is returned by Start when the node's metadata (group,
// RPC address, services) does not fit memberlist's limit.
var ErrMetaTooLarge = errors.New("cluster: node metadata too large")

// nodeMeta is what a node publishes about itself through memberlist.
type nodeMeta struct {
	Leaving    bool // set by Leave before the leave message, see Cluster.Leave
	CatchingUp bool // a replica on the node is behind (Config.Ready)
	Group      string
	RPCAddr    string
	Services   []string
}

// meta is what the node configured by c publishes.
func (c *Config) meta(leaving, catchingUp bool) nodeMeta {
	return nodeMeta{Leaving: leaving, CatchingUp: catchingUp, Group: c.Group, RPCAddr: c.RPCAddr, Services: c.Services}
}

// The flag bits of nodeMeta. A node that does not know a bit ignores it.
const (
	metaLeaving    = 1
	metaCatchingUp = 2
)

// encode returns the compact binary form: version, flags, group, RPC
// address, then the count and names of the services, each length-prefixed.
func (m nodeMeta) encode() ([]byte, error) {
	var flags byte
	if m.Leaving {
		flags |= metaLeaving
	}
	if m.CatchingUp {
		flags |= metaCatchingUp
	}
	b := []byte{metaVersion, flags}
	b = codec.AppendString(b, m.Group)
	b = codec.AppendString(b, m.RPCAddr)
	b = codec.AppendUvarint(b, uint64(len(m.Services)))
	for _, s := range m.Services {
		b = codec.AppendString(b, s)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes for group, RPC address and %d services, limit %d",
			ErrMetaTooLarge, len(b), len(m.Services), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	if len(b) == 0 {
		return nodeMeta{}, errors.New("cluster: node has no metadata")
	}
	if b[0] != metaVersion {
		return nodeMeta{}, fmt.Errorf("cluster: node metadata version %d, want %d", b[0], metaVersion)
	}
	r := codec.NewReader(b[1:])
	flags := r.Byte()
	m := nodeMeta{Leaving: flags&metaLeaving != 0, CatchingUp: flags&metaCatchingUp != 0, Group: r.String(), RPCAddr: r.String()}
	if n := r.Len32(); n > 0 {
		m.Services = make([]string, n)
		for i := range m.Services {
			m.Services[i] = r.String()
		}
	}
	if err := r.Done(); err != nil {
		return nodeMeta{}, fmt.Errorf("cluster: bad node metadata: %w", err)
	}
	return m, nil
}

func (m nodeMeta) member(name string) runtime.Member {
	return runtime.Member{Name: name, Group: m.Group, Addr: m.RPCAddr, Services: m.Services}
}
