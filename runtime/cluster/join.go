package cluster

import (
	"errors"
	"fmt"
	"time"
)

// otherSeeds returns the seeds without this node's own gossip address:
// every node of a deployment can be given the same seed list.
func (c *Cluster) otherSeeds() []string {
	self := c.localAddr()
	var out []string
	for _, s := range c.cfg.Seeds {
		if s != self && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// joinLoop joins the seeds, retrying with exponential backoff until one
// answers, another node joins us, or the node stops. Seeds that are not up
// yet are normal at deployment time, so failures are logged, not fatal.
func (c *Cluster) joinLoop(seeds []string) {
	defer c.wg.Done()
	delay := c.cfg.JoinRetryMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	for attempt := 1; ; attempt++ {
		select {
		case <-c.stop:
			return
		case <-timer.C:
		}
		if c.Joined() {
			return
		}
		n, err := c.ml.Join(seeds)
		if n > 0 {
			c.setJoined()
			c.log.Info("cluster: joined", "seeds", seeds, "reached", n, "attempts", attempt)
			return
		}
		if err == nil {
			err = errors.New("no seed answered")
		}
		err = c.explainJoinError(err)
		c.mu.Lock()
		if !c.joined.Load() {
			c.joinErr = err
		}
		c.mu.Unlock()
		c.log.Warn("cluster: join failed, retrying", "seeds", seeds, "attempt", attempt, "retry_in", delay, "err", err)
		timer.Reset(delay)
		delay = min(2*delay, c.cfg.JoinRetryMax)
	}
}

// explainJoinError adds the likely cause when gossip is encrypted: a peer
// with another key drops our messages, which shows here only as a broken
// connection.
func (c *Cluster) explainJoinError(err error) error {
	if len(c.cfg.SecretKey) == 0 && c.cfg.Keyring == nil {
		return fmt.Errorf("cluster: join: %w", err)
	}
	return fmt.Errorf("cluster: join: %w (gossip is encrypted: every node must use the same key; a peer with another key or none drops our messages)", err)
}
