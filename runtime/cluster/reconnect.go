package cluster

import (
	"math/rand/v2"
	"time"
)

// reconnectLoop heals partitions. memberlist stops talking to a node once
// it is declared dead: it neither probes it nor picks it for push-pull,
// and gossips to it only for GossipToTheDeadTime. When a partition lasts
// longer than that, each side keeps the other for dead after the network
// heals, until something makes them meet again, and no client routes to
// the far side for that long (replication keeps sending to a voter listed
// dead, so its replicas catch up meanwhile). So every
// ReconnectInterval this node joins one member it lists as dead (not
// left), picked at random, for ReconnectTimeout after the death. The join
// is memberlist's push-pull: each side learns that the other has it for
// dead and refutes it, and both are alive again within a round of gossip.
func (c *Cluster) reconnectLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		name, addr := c.reconnectCandidate(time.Now())
		if addr == "" {
			continue
		}
		if _, err := c.ml.Join([]string{addr}); err != nil {
			c.log.Debug("cluster: reconnect to a dead member failed", "member", name, "gossip", addr, "err", err)
			continue
		}
		c.log.Info("cluster: reconnected to a member listed as dead", "member", name, "gossip", addr)
	}
}

// reconnectCandidate picks a dead member that died within ReconnectTimeout
// and has a gossip address; "" when there is none.
func (c *Cluster) reconnectCandidate(now time.Time) (name, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.nodes {
		if m.State != StateDead || m.GossipAddress == "" || m.Local {
			continue
		}
		if c.cfg.ReconnectTimeout > 0 && now.Sub(m.Since) > c.cfg.ReconnectTimeout {
			continue
		}
		// Reservoir sampling: each candidate equally likely, in one pass.
		if n++; rand.IntN(n) == 0 {
			name, addr = m.Name, m.GossipAddress
		}
	}
	return name, addr
}
