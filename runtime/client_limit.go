package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// LimitConfig tunes a client's adaptive concurrency limit: how many
// attempts it keeps in flight to one node at once. The limit is learned
// by AIMD, as Netflix's concurrency-limits does: each attempt answered
// quickly raises it by 1/limit (one a round), and a sign that the node has
// more than it takes lowers it to Backoff times what was in flight, once a
// round (for an attempt that started after the last decrease, and no
// sooner than the node's recent answers of the method take after it), as
// TCP lowers its window once per window; a refusal in between holds it at
// what is still in flight, so that the refused slot is not sent to the
// node again at once. The signs are a refusal for
// overload, a heartbeat or attempt timeout, and, with Tolerance, recent
// answers of a method that take Tolerance times their long-run average,
// the baseline of Netflix's Gradient2 limit. An attempt beyond the limit
// waits on the client for a slot, first come first served, so that a
// fleet of clients backs off to what the node takes instead of queueing
// there or being refused by it; it ends with ErrOverloaded, unsent, only
// if no slot frees before its time is up (the attempt timeout, the
// operation deadline), or at once when Backlog attempts wait already.
// Hedges and failovers count like first attempts.
type LimitConfig struct {
	// Enabled turns the limit on. It is off by default: a client that
	// holds many operations open on one node (long polls, held
	// operations) would otherwise wait for slots they keep.
	Enabled bool
	// Initial is the limit before the node showed one; Min and Max bound
	// it. Defaults 1024, 16 and 4096: the first sign of overload brings
	// the limit down to what was in flight then.
	Initial, Min, Max int
	// Backoff is the factor of a decrease, in (0, 1). Default 0.9.
	Backoff float64
	// Tolerance, above 1, is how many times its long-run average (over
	// about 500 answers) the average of a method's last 25 or so answers
	// from a node may be before it counts as a sign of queueing there.
	// A latency that rises with the load slowly, as on a host whose other
	// work grows, raises the average with it; a node that slows down at
	// once, or queues what a limit grown too far sends it, shows over it.
	// Gradient2's default is 1.5; 2 leaves room for a noisy host. Zero
	// (the default) judges by refusals and timeouts alone. Methods with
	// //ff:hold are never judged by their latency.
	Tolerance float64
	// Backlog bounds the attempts that wait for a slot to one node, as a
	// multiple of the limit: an attempt that finds that many waiting is
	// refused at once, unsent, with ErrOverloaded, as a node past its
	// admission limits refuses it, instead of waiting behind them. One
	// holds the wait for a slot to about one more answer of the node:
	// the calls a client takes on stay near the node's own latency, and
	// the rest are shed to the caller, who may retry after the hint or
	// shed the request upstream. Zero (the default): any number wait,
	// each until its time is up, turning load into latency on the
	// client rather than into refusals.
	Backlog float64
}

func (lc *LimitConfig) withDefaults() {
	if lc.Initial <= 0 {
		lc.Initial = 1024
	}
	if lc.Min <= 0 {
		lc.Min = 16
	}
	if lc.Max <= 0 {
		lc.Max = 4096
	}
	lc.Min = min(lc.Min, lc.Max)
	lc.Initial = min(max(lc.Initial, lc.Min), lc.Max)
	if lc.Backoff <= 0 || lc.Backoff >= 1 {
		lc.Backoff = 0.9
	}
	if lc.Tolerance <= 1 {
		lc.Tolerance = 0
	}
	lc.Backlog = max(lc.Backlog, 0)
}

// peerLimit is the limit to one node.
type peerLimit struct {
	mu       sync.Mutex // guards the following
	limit    float64
	inflight int
	lastDrop time.Time
	waiting  []*slotWait // attempts waiting for a slot, first come first
	drops    LimitDecreases
	latency  map[*methodLatency]*latency
}

// slotWait is an attempt waiting for a slot of a peerLimit.
type slotWait struct {
	ready   chan struct{} // closed when the slot is granted
	granted bool          // guarded by the peerLimit's mu
}

// limits are a client's peer limits, by node name.
type limits struct {
	cfg   LimitConfig
	peers sync.Map // node name → *peerLimit
}

func (ls *limits) peer(node string) *peerLimit {
	if p, ok := ls.peers.Load(node); ok {
		return p.(*peerLimit)
	}
	p, _ := ls.peers.LoadOrStore(node, &peerLimit{limit: float64(ls.cfg.Initial)})
	return p.(*peerLimit)
}

// acquire takes a slot to node, waiting in line for one while the limit
// is reached, for wait at most (and not past deadline) or until the end
// of ctx. The wait counts from when it starts, so that a slot taken at
// once costs no clock reading. The limit turns load into waiting on the
// client, where the node would have queued or refused it, not into
// errors: only an attempt that no slot freed for in time ends, with an
// *OverloadError (reason ReasonOverloaded), or, when ctx was cancelled,
// with ctx's reason.
func (ls *limits) acquire(ctx context.Context, node string, wait time.Duration, deadline time.Time, retryAfter time.Duration) (*peerLimit, Reason, error) {
	if !ls.cfg.Enabled {
		return nil, ReasonNone, nil
	}
	p := ls.peer(node)
	p.mu.Lock()
	if p.inflight < int(p.limit) && len(p.waiting) == 0 {
		p.inflight++
		p.mu.Unlock()
		return p, ReasonNone, nil
	}
	if b := ls.cfg.Backlog; b > 0 && float64(len(p.waiting)) >= max(1, b*p.limit) {
		waiting, inflight := len(p.waiting), p.inflight
		p.mu.Unlock()
		return nil, ReasonOverloaded, &OverloadError{Node: node, RetryAfter: retryAfter,
			Detail: fmt.Sprintf("this client's limit to it is reached: %d attempts in flight, %d waiting for a slot (ClientConfig.Limit)", inflight, waiting)}
	}
	w := &slotWait{ready: make(chan struct{})}
	p.waiting = append(p.waiting, w)
	p.mu.Unlock()

	timer := time.NewTimer(min(wait, time.Until(deadline)))
	defer timer.Stop()
	select {
	case <-w.ready:
		return p, ReasonNone, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	if w.granted {
		// Granted as the wait ended: the slot is taken after all.
		p.mu.Unlock()
		return p, ReasonNone, nil
	}
	p.waiting = slices.DeleteFunc(p.waiting, func(o *slotWait) bool { return o == w })
	inflight := p.inflight
	p.mu.Unlock()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, ReasonCancelled, context.Cause(ctx)
	}
	return nil, ReasonOverloaded, &OverloadError{Node: node, RetryAfter: retryAfter,
		Detail: fmt.Sprintf("no slot of this client's limit to it freed in time: %d attempts in flight (ClientConfig.Limit)", inflight)}
}

// release gives p's slot back, learning from how the attempt of the
// method m, which took d, ended: a sign of overload lowers the limit, a
// quick answer raises it. The slots free under the limit go to the
// attempts waiting, in the order they came.
func (ls *limits) release(p *peerLimit, m *methodLatency, hold bool, r Reason, d time.Duration) {
	if p == nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	lat := p.latencyOf(m)
	drop, slow := false, false
	switch r {
	case ReasonOverloaded, ReasonHeartbeatTimeout, ReasonAttemptTimeout:
		drop = true
	case ReasonNone:
		if !hold {
			lat.add(d, ls.cfg.Tolerance)
			slow = ls.cfg.Tolerance > 0 && lat.queueing(ls.cfg.Tolerance)
			drop = slow
		}
	default:
		// Nothing learned: the node failed, or the caller gave up.
	}
	switch {
	case drop && now.Add(-d).After(p.lastDrop) && now.Sub(p.lastDrop) >= lat.round():
		// From what was in flight when the node showed its limit, as
		// TCP halves its flight size and not a window it did not use:
		// a limit that was never reached says nothing of the node.
		p.limit = max(float64(ls.cfg.Min), min(p.limit, float64(p.inflight+1))*ls.cfg.Backoff)
		p.lastDrop = now
		p.drops.count(r, slow)
	case r == ReasonOverloaded:
		// Refused within the round of the last decrease: no second
		// decrease, but the node has just said it holds no more than
		// what is left in flight, so the refused slot goes to no one.
		// Handed on, it went to the next attempt waiting, which the node
		// refused too, and so on through every attempt waiting, each at
		// the cost of a round trip and its retry-after sleep.
		p.limit = max(float64(ls.cfg.Min), min(p.limit, float64(p.inflight)))
	case !drop && r == ReasonNone:
		p.limit = min(float64(ls.cfg.Max), p.limit+1/p.limit)
	}
	for len(p.waiting) > 0 && p.inflight < int(p.limit) {
		w := p.waiting[0]
		p.waiting[0] = nil
		p.waiting = p.waiting[1:]
		w.granted = true
		p.inflight++
		close(w.ready)
	}
}

// latencyOf is what p knows of m's answers, made on first use; p.mu must
// be held.
func (p *peerLimit) latencyOf(m *methodLatency) *latency {
	l := p.latency[m]
	if l == nil {
		if p.latency == nil {
			p.latency = map[*methodLatency]*latency{}
		}
		l = &latency{}
		p.latency[m] = l
	}
	return l
}

// latency is what a peer limit knows of one method's answers from its
// node, as Netflix's Gradient2 limit keeps it: an average over a long
// window of answers, the baseline, and one over a short window, the
// node's state now. Answers that queue behind more than the node takes
// raise the short average above the baseline, and the limit falls; a
// latency that rises with the load slowly, as on a host whose other work
// grows, raises the baseline with it. The least answer, which this
// replaced as the baseline, was a moment of a quiet host: on a busy one
// most answers were many times slower than it, and the limit of every
// client of a fleet fell to LimitConfig.Min.
type latency struct {
	long, short float64 // averages of answers, in nanoseconds
	n           int     // answers seen, up to latencyLong
}

// The windows of a latency, in answers. The short one is long enough
// that one late answer, a thread descheduled on a busy host, does not
// move it past the tolerance alone.
const (
	latencyLong  = 500
	latencyShort = 25
)

// add records an answer that took d. An answer counts for at most twice
// tolerance times the baseline: one that a stall held for a hundred
// times as long moves the short average no more than a few late ones,
// and a node that slows down for good still shows it, each of its
// answers over the tolerance.
func (l *latency) add(d time.Duration, tolerance float64) {
	x := float64(d)
	if l.n > 0 && tolerance > 0 {
		x = min(x, 2*tolerance*l.long)
	}
	l.n = min(l.n+1, latencyLong)
	l.long += (x - l.long) / float64(l.n)
	l.short += (x - l.short) / float64(min(l.n, latencyShort))
	if l.long > 2*l.short {
		// Back from a slow spell: a baseline that kept its memory of it
		// would hide the next one (Gradient2 does the same).
		l.long *= 0.95
	}
}

// queueing reports whether the recent answers are over tolerance times
// the baseline (with a floor of a millisecond, below which scheduling
// noise rules), once a short window of answers has been seen.
func (l *latency) queueing(tolerance float64) bool {
	return l.n >= latencyShort && l.short > max(float64(time.Millisecond), tolerance*l.long)
}

// round is how long an answer takes now: the limit falls at most once in
// it, as TCP lowers its window once a round trip.
func (l *latency) round() time.Duration {
	return time.Duration(l.short)
}

// methodLatency names a method for the latencies that each peer limit
// keeps of its answers.
type methodLatency struct{ name string }

// latencyOf is the methodLatency of m, made on first use.
func (c *Client) latencyOf(m *MethodDesc) *methodLatency {
	if v, ok := c.latency.Load(m); ok {
		return v.(*methodLatency)
	}
	v, _ := c.latency.LoadOrStore(m, &methodLatency{name: m.Service + "." + m.Name})
	return v.(*methodLatency)
}

// PeerLimit is a client's limit to one node.
type PeerLimit struct {
	Node                     string
	Limit, InFlight, Waiting int // Waiting: attempts waiting for a slot
	// Decreases counts the times the limit fell, by the sign that
	// lowered it: what an operator reads to tell a node that refuses or
	// times out from answers judged slow.
	Decreases LimitDecreases
}

// LimitDecreases counts the decreases of a client's limit to a node by
// their sign.
type LimitDecreases struct {
	Refused  int64 // the node refused an attempt for overload
	TimedOut int64 // a heartbeat or attempt timeout
	Slow     int64 // an answer judged slow (LimitConfig.Tolerance)
}

func (ld *LimitDecreases) count(r Reason, slow bool) {
	switch {
	case slow:
		ld.Slow++
	case r == ReasonOverloaded:
		ld.Refused++
	default:
		ld.TimedOut++
	}
}

// Limits lists the client's limit to every node it has sent attempts to;
// none when the limit is disabled.
func (c *Client) Limits() []PeerLimit {
	var out []PeerLimit
	if !c.limits.cfg.Enabled {
		return out
	}
	c.limits.peers.Range(func(k, v any) bool {
		p := v.(*peerLimit)
		p.mu.Lock()
		out = append(out, PeerLimit{Node: k.(string), Limit: int(p.limit), InFlight: p.inflight, Waiting: len(p.waiting), Decreases: p.drops})
		p.mu.Unlock()
		return true
	})
	return out
}
