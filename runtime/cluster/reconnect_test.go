package cluster

import (
	"errors"
	"net"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ffgen/ffgen/internal/testkit"
)

// cuttable is memberlist's UDP/TCP transport with a switch that drops
// everything this node sends and receives: a partition of one node.
type cuttable struct {
	*memberlist.NetTransport
	cut     atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
}

func newCuttable(t *testing.T) *cuttable {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	c := &cuttable{NetTransport: nt, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn)}
	go func() {
		for p := range nt.PacketCh() {
			if !c.cut.Load() {
				c.packets <- p
			}
		}
	}()
	go func() {
		for conn := range nt.StreamCh() {
			if c.cut.Load() {
				conn.Close()
				continue
			}
			c.streams <- conn
		}
	}()
	return c
}

func (c *cuttable) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.cut.Load() {
		return time.Now(), nil
	}
	return c.NetTransport.WriteTo(b, addr)
}

func (c *cuttable) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if c.cut.Load() {
		return nil, errors.New("partitioned")
	}
	return c.NetTransport.DialTimeout(addr, timeout)
}

// memberlist calls these when the transport has them, as NetTransport does.
func (c *cuttable) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return c.WriteTo(b, a.Addr)
}

func (c *cuttable) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return c.DialTimeout(a.Addr, timeout)
}

func (c *cuttable) PacketCh() <-chan *memberlist.Packet { return c.packets }
func (c *cuttable) StreamCh() <-chan net.Conn           { return c.streams }

// A partition that outlasts memberlist's gossip to the dead heals when the
// network does: without the reconnect loop each side would keep the other
// for dead, since memberlist neither probes nor syncs with dead members.
func TestPartitionHealsAfterGossipToTheDeadEnded(t *testing.T) {
	tr := newCuttable(t)
	quickDeath := func(cfg *Config) {
		cfg.ReconnectInterval = 100 * time.Millisecond
		cfg.Tune = func(mc *memberlist.Config) { mc.GossipToTheDeadTime = 100 * time.Millisecond }
	}
	n0 := startNode(t, "n0", "g0", quickDeath)
	n1 := startNode(t, "n1", "g1", quickDeath, seeds(n0))
	n2 := startNode(t, "n2", "g2", seeds(n0), func(cfg *Config) {
		quickDeath(cfg)
		cfg.Tune = func(mc *memberlist.Config) {
			mc.GossipToTheDeadTime = 100 * time.Millisecond
			mc.Transport = tr
		}
	})
	all := []*Cluster{n0, n1, n2}
	for _, c := range all {
		testkit.Until(t, c.cfg.Name+" lists all three", func() bool {
			return reflect.DeepEqual(names(c.Members()), []string{"n0", "n1", "n2"})
		})
	}

	tr.cut.Store(true)
	testkit.Until(t, "n0 and n1 see n2 dead", func() bool {
		return state(n0, "n2") == StateDead && state(n1, "n2") == StateDead
	})
	testkit.Until(t, "n2 sees n0 and n1 dead", func() bool {
		return state(n2, "n0") == StateDead && state(n2, "n1") == StateDead
	})
	// The partition outlasts the gossip to the dead several times over:
	// a fault's length, not a wait for a condition.
	time.Sleep(time.Second)
	tr.cut.Store(false)

	for _, c := range all {
		testkit.Until(t, c.cfg.Name+" lists all three after the partition healed", func() bool {
			return reflect.DeepEqual(names(c.Members()), []string{"n0", "n1", "n2"})
		})
	}
}

func TestReconnectCandidate(t *testing.T) {
	now := time.Now()
	c := &Cluster{cfg: Config{ReconnectTimeout: time.Minute}, nodes: map[string]*MemberStatus{
		"self":   {Name: "self", State: StateDead, GossipAddress: "a:1", Local: true, Since: now},
		"alive":  {Name: "alive", State: StateAlive, GossipAddress: "a:2", Since: now},
		"left":   {Name: "left", State: StateLeft, GossipAddress: "a:3", Since: now},
		"old":    {Name: "old", State: StateDead, GossipAddress: "a:4", Since: now.Add(-2 * time.Minute)},
		"noaddr": {Name: "noaddr", State: StateDead, Since: now},
	}}
	if name, addr := c.reconnectCandidate(now); addr != "" {
		t.Fatalf("candidate %s (%s); want none of: self, alive, left, dead too long, without address", name, addr)
	}
	c.nodes["dead"] = &MemberStatus{Name: "dead", State: StateDead, GossipAddress: "a:5", Since: now.Add(-time.Second)}
	if name, addr := c.reconnectCandidate(now); name != "dead" || addr != "a:5" {
		t.Fatalf("candidate %s (%s), want dead (a:5)", name, addr)
	}
	c.cfg.ReconnectTimeout = 0 // as long as it is listed
	seen := map[string]bool{}
	for range 100 {
		name, _ := c.reconnectCandidate(now)
		seen[name] = true
	}
	if !seen["dead"] || !seen["old"] || len(seen) != 2 {
		t.Fatalf("candidates over 100 picks: %v, want dead and old", seen)
	}
}
