// Package tally holds the counters of calls that the server keeps of what
// it served, whatever Metrics it was given, and that cluster.Stats keeps
// of every call: atomic adds, with no lock and no allocation per event
// once a kind of answer has been seen, so that they can stay on the call
// path.
package tally

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds of the latency histograms: fast
// failover lives in the low milliseconds, operation timeouts in seconds.
var LatencyBuckets = [...]time.Duration{
	1 * time.Millisecond,
	2500 * time.Microsecond,
	5 * time.Millisecond,
	10 * time.Millisecond,
	25 * time.Millisecond,
	50 * time.Millisecond,
	100 * time.Millisecond,
	250 * time.Millisecond,
	500 * time.Millisecond,
	1 * time.Second,
	2500 * time.Millisecond,
	5 * time.Second,
	10 * time.Second,
}

// Histogram counts observations per bucket (not cumulative: each
// observation touches one bucket); an exporter accumulates.
type Histogram struct {
	counts [len(LatencyBuckets) + 1]atomic.Uint64 // the last is above every bound
	sumNs  atomic.Int64
}

// Observe counts d.
func (h *Histogram) Observe(d time.Duration) {
	i := 0
	for i < len(LatencyBuckets) && d > LatencyBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Load returns the count of each bucket, the last above every bound, and
// the sum of the observations.
func (h *Histogram) Load() (counts [len(LatencyBuckets) + 1]uint64, sum time.Duration) {
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
	}
	return counts, time.Duration(h.sumNs.Load())
}

// Answers counts a server's answers by status and code: a lookup in a
// short copy-on-write list (a method has a few declared codes), and a
// counter of its own for "ok", the answer of almost every call.
type Answers struct {
	ok   atomic.Uint64
	mu   sync.Mutex                     // serializes additions to list
	list atomic.Pointer[[]*answerCount] // every other status and code
}

type answerCount struct {
	status, code string
	n            atomic.Uint64
}

// Counter returns the counter of one status and code.
func (a *Answers) Counter(status, code string) *atomic.Uint64 {
	if status == "ok" && code == "" {
		return &a.ok
	}
	if l := a.list.Load(); l != nil {
		for _, c := range *l {
			if c.status == status && c.code == code {
				return &c.n
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var cur []*answerCount
	if l := a.list.Load(); l != nil {
		cur = *l
	}
	for _, c := range cur {
		if c.status == status && c.code == code {
			return &c.n
		}
	}
	c := &answerCount{status: status, code: code}
	next := append(slices.Clip(cur), c)
	a.list.Store(&next)
	return &c.n
}

// Each calls f with every status and code counted, "ok" first if any.
func (a *Answers) Each(f func(status, code string, n uint64)) {
	if n := a.ok.Load(); n > 0 {
		f("ok", "", n)
	}
	if l := a.list.Load(); l != nil {
		for _, c := range *l {
			f(c.status, c.code, c.n.Load())
		}
	}
}

// Served is what a server counts of one method.
type Served struct {
	Running atomic.Int64 // handlers running now
	Answers Answers
	Latency Histogram // how long handlers ran
}

// Handled counts one answer; a refusal ran no handler and has no
// latency.
func (s *Served) Handled(status, code string, d time.Duration) {
	s.Answers.Counter(status, code).Add(1)
	if status != "refused" {
		s.Latency.Observe(d)
	}
}
