package runtime

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ffgen/ffgen/runtime/internal/tally"
)

// MethodServed is what a server counted of one method since it started,
// whatever Metrics it was given: the management endpoint of
// runtime/cluster exports it, so that every node's page and /metrics show
// the calls it served without a cluster.Stats. The statuses and codes are
// those Metrics.Handled receives.
type MethodServed struct {
	Service, Method string
	// Running is how many of its handlers run now.
	Running int64
	// Answers count its handler runs by answer, and the attempts refused
	// without running anything (status "refused").
	Answers []AnswerCount
	// Latency counts handler runs by how long they ran: Latency[i] those
	// within the i-th bound of cluster.Stats's latency histograms and
	// above the one before, the last those above every bound.
	Latency    []uint64
	LatencySum time.Duration
}

// AnswerCount is how many answers of one status and code a method gave.
type AnswerCount struct {
	Status, Code string
	N            uint64
}

// servedCounts are the server's counts of attempts for methods it does not
// serve (refused as unknown), which have no servedMethod to keep them.
type servedCounts struct {
	mu      sync.Mutex // guards unknown
	unknown map[[2]string]*tally.Served
}

// of returns the counts of a method the server does not serve.
func (c *servedCounts) of(service, method string) *tally.Served {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{service, method}
	t := c.unknown[k]
	if t == nil {
		if c.unknown == nil {
			c.unknown = make(map[[2]string]*tally.Served)
		}
		// A client may name any method: past a bound, they share one.
		if len(c.unknown) >= maxUnknownCounted {
			k = [2]string{"", "(other)"}
			if t = c.unknown[k]; t != nil {
				return t
			}
		}
		t = new(tally.Served)
		c.unknown[k] = t
	}
	return t
}

// maxUnknownCounted bounds the unknown methods counted one by one.
const maxUnknownCounted = 64

// Served reports what the server counted of each method it serves, and of
// the methods it refused as not served, sorted by service and method.
func (s *Server) Served() []MethodServed {
	type named struct {
		service, method string
		t               *tally.Served
	}
	var all []named
	s.mu.Lock()
	for name, r := range s.services {
		for m, sm := range r.methods {
			all = append(all, named{name, m, &sm.served})
		}
	}
	s.mu.Unlock()
	s.served.mu.Lock()
	for k, t := range s.served.unknown {
		all = append(all, named{k[0], k[1], t})
	}
	s.served.mu.Unlock()
	slices.SortFunc(all, func(a, b named) int {
		if c := strings.Compare(a.service, b.service); c != 0 {
			return c
		}
		return strings.Compare(a.method, b.method)
	})
	out := make([]MethodServed, 0, len(all))
	for _, n := range all {
		ms := MethodServed{Service: n.service, Method: n.method, Running: n.t.Running.Load()}
		n.t.Answers.Each(func(status, code string, c uint64) {
			ms.Answers = append(ms.Answers, AnswerCount{Status: status, Code: code, N: c})
		})
		counts, sum := n.t.Latency.Load()
		ms.Latency, ms.LatencySum = counts[:], sum
		out = append(out, ms)
	}
	return out
}
