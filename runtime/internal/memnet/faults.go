package memnet

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// Faults of a Network. Each can be switched on and off at any time; they
// name nodes by their transport.Config.Node. Link faults (cut, delay, drop) act when a
// frame is sent: a frame already in flight keeps the fate it was given.
// Pause acts on delivery.

// memFaults is the fault state of a Network, guarded by its mutex.
type memFaults struct {
	nodes   map[string]*memNodeFaults
	links   map[memLinkKey]*memLinkFaults
	rng     *rand.Rand
	dropped uint64
}

type memNodeFaults struct {
	paused   bool
	isolated bool
}

type memLinkKey struct{ from, to string }

type memLinkFaults struct {
	cut      bool
	noDial   bool // dials from → to wait (BlockDials)
	delay    time.Duration
	dropP    float64
	dropNext int
}

func (f *memFaults) init() {
	f.nodes = make(map[string]*memNodeFaults)
	f.links = make(map[memLinkKey]*memLinkFaults)
	f.rng = rand.New(rand.NewPCG(1, 1))
}

func (f *memFaults) node(name string) *memNodeFaults {
	nf := f.nodes[name]
	if nf == nil {
		nf = new(memNodeFaults)
		f.nodes[name] = nf
	}
	return nf
}

func (f *memFaults) link(from, to string) *memLinkFaults {
	k := memLinkKey{from, to}
	lf := f.links[k]
	if lf == nil {
		lf = new(memLinkFaults)
		f.links[k] = lf
	}
	return lf
}

func (f *memFaults) pausedLocked(node string) bool {
	nf := f.nodes[node]
	return nf != nil && nf.paused
}

func (f *memFaults) cutLocked(from, to string) bool {
	if nf := f.nodes[from]; nf != nil && nf.isolated {
		return true
	}
	if nf := f.nodes[to]; nf != nil && nf.isolated {
		return true
	}
	lf := f.links[memLinkKey{from, to}]
	return lf != nil && lf.cut
}

// dialBlockedLocked reports whether dials from one node to the other
// wait: a cut either way, or BlockDials.
func (f *memFaults) dialBlockedLocked(from, to string) bool {
	if f.cutLocked(from, to) || f.cutLocked(to, from) {
		return true
	}
	lf := f.links[memLinkKey{from, to}]
	return lf != nil && lf.noDial
}

func (f *memFaults) delayLocked(from, to string) time.Duration {
	if lf := f.links[memLinkKey{from, to}]; lf != nil {
		return lf.delay
	}
	return 0
}

// loseLocked decides whether a frame sent now from one node to another is
// lost, and counts it if so.
func (f *memFaults) loseLocked(from, to string) bool {
	lost := f.cutLocked(from, to)
	if lf := f.links[memLinkKey{from, to}]; !lost && lf != nil {
		switch {
		case lf.dropNext > 0:
			lf.dropNext--
			lost = true
		case lf.dropP > 0:
			lost = f.rng.Float64() < lf.dropP
		}
	}
	if lost {
		f.dropped++
	}
	return lost
}

// change applies fn to the fault state under the lock and wakes whoever
// waits on it.
func (n *Network) change(fn func(f *memFaults)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn(&n.memFaults)
	n.broadcastLocked()
}

// Seed reseeds the random source of Drop, so a test's drops are the same on
// every run. A new network is seeded with 1.
func (n *Network) Seed(seed uint64) {
	n.change(func(f *memFaults) { f.rng = rand.New(rand.NewPCG(seed, seed)) })
}

// Pause stops a node as SIGSTOP would: no frame goes in or out of it, and
// its handlers get no calls, not even HandleClose. Frames to and from it are
// held in order, not lost (they still count against the senders' queue
// limits), and dials to or from it wait. Connections stay up.
func (n *Network) Pause(node string) {
	n.change(func(f *memFaults) { f.node(node).paused = true })
}

// Resume undoes Pause: everything held is delivered, in the original order,
// and waiting dials proceed.
func (n *Network) Resume(node string) {
	n.change(func(f *memFaults) { f.node(node).paused = false })
}

// Cut drops every frame sent from one node to the other, silently, like a
// one-way partition: the connection does not break. Dials between the two
// wait while either direction is cut.
func (n *Network) Cut(from, to string) {
	n.change(func(f *memFaults) { f.link(from, to).cut = true })
}

// CutBoth cuts both directions between a and b.
func (n *Network) CutBoth(a, b string) {
	n.change(func(f *memFaults) {
		f.link(a, b).cut = true
		f.link(b, a).cut = true
	})
}

// BlockDials makes dials from one node to the other wait, as a firewall
// that drops connection attempts one way would, while the connections the
// other node opens carry frames both ways. Heal lifts it.
func (n *Network) BlockDials(from, to string) {
	n.change(func(f *memFaults) { f.link(from, to).noDial = true })
}

// Isolate cuts every link to and from node, including links to nodes that
// join later. Undo it with Rejoin; Heal does not.
func (n *Network) Isolate(node string) {
	n.change(func(f *memFaults) { f.node(node).isolated = true })
}

// Rejoin undoes Isolate.
func (n *Network) Rejoin(node string) {
	n.change(func(f *memFaults) { f.node(node).isolated = false })
}

// Delay makes frames from one node to the other arrive d after they are
// sent, order kept: a frame never overtakes an earlier one, even when the
// delay shrinks. Zero removes the delay.
func (n *Network) Delay(from, to string, d time.Duration) {
	n.change(func(f *memFaults) { f.link(from, to).delay = max(d, 0) })
}

// Drop loses each frame sent from one node to the other with probability p
// (clamped to [0, 1]), drawn from the network's seeded source. Zero stops
// it.
func (n *Network) Drop(from, to string, p float64) {
	if math.IsNaN(p) {
		p = 0
	}
	n.change(func(f *memFaults) { f.link(from, to).dropP = min(max(p, 0), 1) })
}

// DropNext loses the next count frames sent from one node to the other;
// after them the link's other faults apply again.
func (n *Network) DropNext(from, to string, count int) {
	n.change(func(f *memFaults) { f.link(from, to).dropNext = max(count, 0) })
}

// Heal removes the cuts, delays, drops and blocked dials between a and b,
// both ways.
func (n *Network) Heal(a, b string) {
	n.change(func(f *memFaults) {
		delete(f.links, memLinkKey{a, b})
		delete(f.links, memLinkKey{b, a})
	})
}

// HealAll removes every fault: link faults go, isolated nodes rejoin and
// paused nodes resume.
func (n *Network) HealAll() {
	n.change(func(f *memFaults) {
		clear(f.links)
		clear(f.nodes)
	})
}

// Dropped returns how many frames cuts and drops have lost so far.
func (n *Network) Dropped() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dropped
}

// Reset breaks every connection between nodes a and b, as a TCP reset
// would: queued frames are lost and both ends get HandleClose with transport.ErrReset
// (a paused end gets it when it resumes). It returns how many connections
// it broke.
func (n *Network) Reset(a, b string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.resetLocked(func(c *memConn) bool {
		x, y := c.ends[0].t.cfg.Node, c.ends[1].t.cfg.Node
		return x == a && y == b || x == b && y == a
	}, memResetErr)
}

// ResetNode breaks every connection of node, as Reset does.
func (n *Network) ResetNode(node string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.resetLocked(func(c *memConn) bool {
		return c.ends[0].t.cfg.Node == node || c.ends[1].t.cfg.Node == node
	}, memResetErr)
}

func memResetErr(*memEnd) error { return transport.ErrReset }
