package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// resolveTimeout bounds the DNS lookups of one join attempt.
const resolveTimeout = 5 * time.Second

// otherSeeds returns the seeds without this node's own gossip address:
// every node of a deployment can be given the same seed list.
func (c *Cluster) otherSeeds(seeds []string) []string {
	self := c.localAddr()
	var out []string
	for _, s := range seeds {
		if s != self && s != "" {
			out = append(out, s)
		}
	}
	return out
}

// needsJoin reports whether Start must join rather than start a new
// cluster: some seed is another node, or DNS has to say who the seeds are.
// A node whose DNS seeds name only itself waits to be joined, which is what
// the first pod behind a headless service must do.
func (c *Cluster) needsJoin() bool {
	return hasDNS(c.cfg.Seeds) || len(c.otherSeeds(c.cfg.Seeds)) > 0
}

// joinSeeds resolves the seeds anew, so that DNS seeds follow the nodes
// that exist now, and drops this node.
func (c *Cluster) joinSeeds() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	resolved, err := Resolve(ctx, c.cfg.Resolver, c.cfg.Seeds)
	seeds := c.otherSeeds(resolved)
	if len(seeds) == 0 {
		if err == nil {
			err = fmt.Errorf("seeds %v resolve to no node but this one (%v)", c.cfg.Seeds, resolved)
		}
		return nil, err
	}
	if err != nil {
		c.log.Debug("cluster: some seeds did not resolve", "err", err)
	}
	return seeds, nil
}

// ErrNameTaken is returned by Start when a live node of the cluster already
// has this node's name: joining would make the two fight over it, and
// the real one would be listed as dead when the newcomer stops.
var ErrNameTaken = errors.New("cluster: node name already taken")

// join makes one join attempt and reports whether it joined.
func (c *Cluster) join(attempt int) (bool, error) {
	seeds, err := c.joinSeeds()
	n := 0
	if err == nil {
		n, err = c.ml.Join(seeds)
	}
	if n > 0 {
		c.setJoined()
		c.log.Info("cluster: joined", "seeds", seeds, "reached", n, "attempts", attempt)
		return true, nil
	}
	if taken := c.nameTaken.Load(); taken != nil {
		return false, *taken
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
	return false, err
}

// joinLoop joins the seeds, retrying with exponential backoff until one
// answers, another node joins us, or the node stops. Seeds that are not up
// yet are normal at deployment time, so failures are logged, not fatal,
// except a name another live node has: that one does not mend.
func (c *Cluster) joinLoop(attempt int) {
	defer c.wg.Done()
	delay := c.cfg.JoinRetryMin
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for ; ; attempt++ {
		select {
		case <-c.stop:
			return
		case <-timer.C:
		}
		if c.Joined() {
			return
		}
		joined, err := c.join(attempt)
		if joined {
			return
		}
		if errors.Is(err, ErrNameTaken) {
			c.mu.Lock()
			c.joinErr = err
			c.mu.Unlock()
			c.log.Error("cluster: not joining", "err", err)
			return
		}
		c.log.Warn("cluster: join failed, retrying", "seeds", c.cfg.Seeds, "attempt", attempt, "retry_in", delay, "err", err)
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
