package fftest

import (
	"time"

	"github.com/ffgen/ffgen/runtime/internal/memnet"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Network is an in-process network with switchable faults, the one a
// Cluster runs on. Frames go through the real wire format, and every
// goroutine it starts waits only on channels and timers, so inside a
// testing/synctest bubble the fake clock drives heartbeats, delays and
// timeouts deterministically. Faults name nodes by their transport.Config.Node:
// link faults (cut, delay, drop) act when a frame is sent, so a frame
// already in flight keeps the fate it was given; Pause acts on delivery.
// Its methods are safe for concurrent use.
type Network struct {
	n *memnet.Network
}

// NewNetwork returns an empty network with no faults; random drops are
// seeded with 1 (see Seed). A test that makes its own network, rather than
// using a Cluster's, closes it before its synctest bubble ends, so that no
// goroutine outlives the bubble.
func NewNetwork() *Network {
	return &Network{n: memnet.NewNetwork()}
}

// Transport returns a transport for the node cfg.Node. Give every node a
// distinct name: two transports with the same name (a restarted node, say)
// share that node's faults. The empty listen address means the node's name.
func (n *Network) Transport(cfg transport.Config) transport.Transport {
	return n.n.Transport(cfg)
}

// Close tears the whole network down: every listener closes, every
// connection ends with transport.ErrClosed on both ends (even on a paused
// node), and waiting dials fail. It is idempotent.
func (n *Network) Close() error { return n.n.Close() }

// Pause stops a node as SIGSTOP would: no frame goes in or out of it, and
// its handlers get no calls. Frames to and from it are held in order, not
// lost (they still count against the senders' queue limits), and dials to
// or from it wait. Connections stay up.
func (n *Network) Pause(node string) { n.n.Pause(node) }

// Resume undoes Pause: everything held is delivered, in the original order,
// and waiting dials proceed.
func (n *Network) Resume(node string) { n.n.Resume(node) }

// Cut drops every frame sent from one node to the other, silently, like a
// one-way partition: the connection does not break. Dials between the two
// wait while either direction is cut.
func (n *Network) Cut(from, to string) { n.n.Cut(from, to) }

// CutBoth cuts both directions between a and b.
func (n *Network) CutBoth(a, b string) { n.n.CutBoth(a, b) }

// BlockDials makes dials from one node to the other wait, as a firewall
// that drops connection attempts one way would; connections the other
// node opens still carry frames both ways. Heal lifts it.
func (n *Network) BlockDials(from, to string) { n.n.BlockDials(from, to) }

// Isolate cuts every link to and from node, including links to nodes that
// join later. Undo it with Rejoin; Heal does not.
func (n *Network) Isolate(node string) { n.n.Isolate(node) }

// Rejoin undoes Isolate.
func (n *Network) Rejoin(node string) { n.n.Rejoin(node) }

// Delay makes frames from one node to the other arrive d after they are
// sent, order kept: a frame never overtakes an earlier one, even when the
// delay shrinks. Zero removes the delay.
func (n *Network) Delay(from, to string, d time.Duration) { n.n.Delay(from, to, d) }

// Drop loses each frame sent from one node to the other with probability p
// (clamped to [0, 1]), drawn from the network's seeded source. Zero stops
// it.
func (n *Network) Drop(from, to string, p float64) { n.n.Drop(from, to, p) }

// DropNext loses the next count frames sent from one node to the other;
// after them the link's other faults apply again.
func (n *Network) DropNext(from, to string, count int) { n.n.DropNext(from, to, count) }

// Dropped returns how many frames cuts and drops have lost so far.
func (n *Network) Dropped() uint64 { return n.n.Dropped() }

// Seed reseeds the random source of Drop, so a test's drops are the same
// on every run.
func (n *Network) Seed(seed uint64) { n.n.Seed(seed) }

// Heal removes the cuts, delays, drops and blocked dials between a and b,
// both ways.
func (n *Network) Heal(a, b string) { n.n.Heal(a, b) }

// HealAll removes every fault: link faults go, isolated nodes rejoin and
// paused nodes resume.
func (n *Network) HealAll() { n.n.HealAll() }

// Reset breaks every connection between nodes a and b, as a TCP reset
// would: queued frames are lost and both ends' handlers get an error
// matching transport.ErrReset (a paused end gets it when it resumes). It
// returns how many connections it broke.
func (n *Network) Reset(a, b string) int { return n.n.Reset(a, b) }

// ResetNode breaks every connection of node, as Reset does.
func (n *Network) ResetNode(node string) int { return n.n.ResetNode(node) }
