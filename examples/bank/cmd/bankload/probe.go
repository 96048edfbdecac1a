package main

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	bank "github.com/ffgen/ffgen/examples/bank/internal/accounts"
	"github.com/ffgen/ffgen/runtime"
)

// probe is a runtime.Metrics for one client. A client whose operations run
// one at a time, as each caller's read client does without -clients,
// reports every event of an operation before Invoke returns, so take()
// attributes the failovers to the operation that paid for them. Whatever
// the layout it counts the failovers of reads and the attempts of writes
// that ended unanswered, by reason.
type probe struct {
	mu        sync.Mutex
	failovers []runtime.Reason // of the current operation
	// readFailovers counts the failovers of reads; writeEnds how the
	// attempts of writes (scattered methods) ended.
	readFailovers, writeEnds map[runtime.Reason]uint64
	live                     *live // counts the failovers of reads as they come
}

func newProbe(lv *live) *probe {
	return &probe{readFailovers: make(map[runtime.Reason]uint64), writeEnds: make(map[runtime.Reason]uint64), live: lv}
}

var _ runtime.Metrics = (*probe)(nil)

// scattered names the bank's replicated writes: their attempts are the
// write legs of the summary.
var scattered = func() map[string]bool {
	m := map[string]bool{}
	for _, md := range bank.AccountsDesc.Methods {
		m[md.Name] = md.Mode == runtime.ModeScatter
	}
	return m
}()

func (p *probe) AttemptStarted(string, string) {}

func (p *probe) AttemptEnded(_, method string, r runtime.Reason, _ time.Duration) {
	if !scattered[method] {
		return
	}
	p.mu.Lock()
	p.writeEnds[r]++
	p.mu.Unlock()
}

func (p *probe) Failover(_, method string, r runtime.Reason) {
	if scattered[method] {
		return
	}
	p.mu.Lock()
	p.failovers = append(p.failovers, r)
	p.readFailovers[r]++
	p.mu.Unlock()
	p.live.failovers.Add(1)
}

func (p *probe) OperationEnded(string, string, bool, time.Duration)    {}
func (p *probe) ServerAttempt(string, string, int)                     {}
func (p *probe) Handled(string, string, string, string, time.Duration) {}

// take returns the failovers of reads since the last call and forgets
// them: those of the caller's last read when the client is its own.
func (p *probe) take() []runtime.Reason {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.failovers
	p.failovers = nil
	return f
}

// counts returns the failovers of reads and how the attempts of writes
// ended, by reason.
func (p *probe) counts() (readFailovers, writeEnds map[runtime.Reason]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.readFailovers), maps.Clone(p.writeEnds)
}

// onceHandler passes each distinct message about each node once: a dead
// node would otherwise log a line for every write it misses. The runtime
// names the node at the other end "peer", the cluster "node".
type onceHandler struct {
	slog.Handler
	mu   *sync.Mutex
	seen map[string]bool
}

func newOnceHandler(h slog.Handler) *onceHandler {
	return &onceHandler{Handler: h, mu: new(sync.Mutex), seen: make(map[string]bool)}
}

func (h *onceHandler) Handle(ctx context.Context, r slog.Record) error {
	key := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "node" || a.Key == "peer" || a.Key == "reason" {
			key += "\x00" + a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	dup := h.seen[key]
	h.seen[key] = true
	h.mu.Unlock()
	if dup {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *onceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &onceHandler{Handler: h.Handler.WithAttrs(as), mu: h.mu, seen: h.seen}
}

func (h *onceHandler) WithGroup(name string) slog.Handler {
	return &onceHandler{Handler: h.Handler.WithGroup(name), mu: h.mu, seen: h.seen}
}

// suspicionCounter counts the clients' suspicions of nodes by reason, from
// their log lines, before the once filter drops the repeats.
type suspicionCounter struct {
	slog.Handler
	mu *sync.Mutex
	n  map[string]uint64
}

func newSuspicionCounter(h slog.Handler) *suspicionCounter {
	return &suspicionCounter{Handler: h, mu: new(sync.Mutex), n: make(map[string]uint64)}
}

func (h *suspicionCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &suspicionCounter{Handler: h.Handler.WithAttrs(as), mu: h.mu, n: h.n}
}

func (h *suspicionCounter) WithGroup(name string) slog.Handler {
	return &suspicionCounter{Handler: h.Handler.WithGroup(name), mu: h.mu, n: h.n}
}

func (h *suspicionCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "ffgen: node suspected" {
		reason := "unknown"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				reason = a.Value.String()
				return false
			}
			return true
		})
		h.mu.Lock()
		h.n[reason]++
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

// counts returns the suspicions so far, by reason.
func (h *suspicionCounter) counts() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.n)
}
