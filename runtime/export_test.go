package runtime

import "github.com/ffgen/ffgen/runtime/transport"

// What the package's external tests need to see and users do not.

// NewBudget makes a failover budget, for tests of its errors.
func NewBudget(s BudgetSettings) *budget { return newBudget(s) }

// Conns lists the client's open connections.
func (c *Client) Conns() []transport.Conn { return c.pool.Conns() }

// Suspected reports whether the client suspects node now.
func (c *Client) Suspected(node string) bool { return c.suspected(node) }

// RedirectRetests reports whether a redirect to node now would redial it
// (redirectVouches).
func (c *Client) RedirectRetests(node string) bool {
	_, pr := c.redirectVouches(node, c.cfg.Settings.HeartbeatTimeout)
	return pr != nil
}

// Suspect suspects node for why, as a failed attempt would.
func (c *Client) Suspect(node string, why Reason) { c.suspect(node, why) }

// EntityQueues is the number of entities with a queue on the server.
func (s *Server) EntityQueues() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entities)
}

// FreezeReplicas stops driving the raft of every replicated service on s,
// or starts it again, as SIGSTOP and SIGCONT would: with the network's
// Pause, a node frozen whole, whose leader thaws believing it still leads.
func FreezeReplicas(s *Server, frozen bool) {
	s.mu.Lock()
	reps := make([]*replicated, 0, len(s.replicas))
	for _, r := range s.replicas {
		reps = append(reps, r)
	}
	s.mu.Unlock()
	for _, r := range reps {
		if frozen {
			r.g.Freeze()
		} else {
			r.g.Thaw()
		}
	}
}

// Remembered is how many results the server remembers by operation ID.
func (s *Server) Remembered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.results.m)
}
