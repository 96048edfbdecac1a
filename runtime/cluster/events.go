package cluster

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate receives memberlist's callbacks. memberlist calls the event
// methods while holding its node lock, so they copy what they need, take
// only the cluster's own lock and never call back into memberlist.
type delegate struct{ c *Cluster }

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate  = (*delegate)(nil)
)

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.alive(n) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.alive(n) }

// alive records a node that joined, came back with a new incarnation, or
// changed its metadata.
func (d *delegate) alive(n *memberlist.Node) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		// A node we cannot route to (another program, a newer format):
		// never route to it, say why once per event.
		d.c.log.Warn("cluster: ignoring node with unreadable metadata", "peer", n.Name, "addr", n.Address(), "err", err)
		return
	}
	m := meta.member(n.Name)
	st := StateAlive
	if meta.Leaving {
		st = StateLeaving
	}
	d.c.setState(n.Name, n.Address(), &m, st, meta.CatchingUp)
}

// NotifyLeave reports both a crash and a leave: memberlist never fills
// Node.State, so the leaving flag in the metadata tells them apart.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.c.gone(n.Name) }

// NodeMeta publishes group, RPC address and services, encoded and checked
// against the limit by Start.
func (d *delegate) NodeMeta(limit int) []byte { return *d.c.meta.Load() }

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyPingComplete clears this node's suspicion of a peer that answered
// a direct probe.
func (d *delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.c.transition(other.Name, StateSuspect, StateAlive)
}

func (d *delegate) AckPayload() []byte { return nil }
