package cluster

import (
	"fmt"
	"net"
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
	_ memberlist.MergeDelegate = (*delegate)(nil)
)

// NotifyMerge refuses, while this node has not joined yet, a cluster in
// which a node with this node's name lives at another address and still
// answers there: joining would make memberlist take the name from it, and
// the real node would be listed as dead when this one stops. A node that
// does not answer is this node's own earlier life (a restart on another
// port), which the cluster will declare dead: that merge goes ahead.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	if d.c.joined.Load() {
		return nil
	}
	self := d.c.localAddr()
	if self == "" {
		return nil // not known yet: nothing to tell this node from another by
	}
	for _, p := range peers {
		if p.Name != d.c.cfg.Name || p.Address() == self || p.State == memberlist.StateDead || p.State == memberlist.StateLeft {
			continue
		}
		conn, err := net.DialTimeout("tcp", p.Address(), nameProbeTimeout)
		if err != nil {
			continue
		}
		conn.Close()
		err = fmt.Errorf("%w: a live node named %q already gossips at %s (this node is at %s): give every node a name of its own",
			ErrNameTaken, p.Name, p.Address(), self)
		d.c.nameTaken.Store(&err)
		return err
	}
	return nil
}

// nameProbeTimeout bounds the dial that tells a live holder of this node's
// name from a stale entry.
const nameProbeTimeout = time.Second

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
	d.c.setState(n.Name, n.Address(), &m, st, meta.CatchingUp, meta.Boot)
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
