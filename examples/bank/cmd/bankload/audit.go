package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
)

// maxExact bounds the uncertain operations per account checked exactly (by
// every subset); beyond it the audit only checks the range they span.
const maxExact = 16

// ledgerModel is what the balances must be, from the acknowledged writes.
// An operation whose outcome is unknown (a timeout after it was sent) may
// or may not have run on each node, so each is kept as an uncertain delta
// and the audit accepts either outcome for it.
type ledgerModel struct {
	mu       sync.Mutex
	accounts map[string]*expected
}

type expected struct {
	base      int64   // initial balance plus every acknowledged change
	uncertain []int64 // changes that may or may not have been applied
}

func newModel(ids []string, initial int64) *ledgerModel {
	m := &ledgerModel{accounts: make(map[string]*expected, len(ids))}
	for _, id := range ids {
		m.accounts[id] = &expected{base: initial}
	}
	return m
}

// outcome classifies a write's error: applied (nil), not applied (a
// declared error: the handler ran and refused; or never sent), or unknown.
type outcome int

const (
	applied outcome = iota
	notApplied
	unknown
)

func classify(err error) outcome {
	if err == nil {
		return applied
	}
	var re *runtime.Error
	if errors.As(err, &re) {
		if runtime.MaybeExecuted(err) {
			return unknown
		}
		return notApplied
	}
	return notApplied // a declared Fail error, returned as itself
}

// record applies a write's outcome: deltas by account.
func (m *ledgerModel) record(o outcome, deltas ...delta) {
	if o == notApplied {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range deltas {
		e := m.accounts[d.account]
		if o == applied {
			e.base += d.amount
		} else {
			e.uncertain = append(e.uncertain, d.amount)
		}
	}
}

type delta struct {
	account string
	amount  int64
}

// uncertainOps counts the uncertain deltas.
func (m *ledgerModel) uncertainOps() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.accounts {
		n += len(e.uncertain)
	}
	return n
}

// explains reports whether got is base plus some subset of the uncertain
// deltas (or, past maxExact of them, lies in their range).
func (e *expected) explains(got int64) bool {
	diff := got - e.base
	if len(e.uncertain) > maxExact {
		var lo, hi int64
		for _, u := range e.uncertain {
			if u < 0 {
				lo += u
			} else {
				hi += u
			}
		}
		return lo <= diff && diff <= hi
	}
	for mask := 0; mask < 1<<len(e.uncertain); mask++ {
		var sum int64
		for i, u := range e.uncertain {
			if mask&(1<<i) != 0 {
				sum += u
			}
		}
		if sum == diff {
			return true
		}
	}
	return false
}

// check compares one node's report with the model.
func (m *ledgerModel) check(r cli.Report) (mismatches []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.accounts))
	for id := range m.accounts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := m.accounts[id]
		got, ok := r.Balances[id]
		switch {
		case !ok:
			mismatches = append(mismatches, fmt.Sprintf("%s: missing", id))
		case !e.explains(got):
			mismatches = append(mismatches, fmt.Sprintf("%s: balance %d, expected %d (%d uncertain operations)", id, got, e.base, len(e.uncertain)))
		}
	}
	return mismatches
}

// audit reads every node's balances until each reachable node agrees with
// the model and has nothing in flight, or until timeout: a node that was
// frozen may still be applying the writes it received meanwhile. A node
// that does not answer (killed) is reported and skipped.
func audit(ctx context.Context, hc *http.Client, m *ledgerModel, addrs []string, prefix string, timeout time.Duration) (nodes []cli.NodeAudit, passed bool) {
	deadline := time.Now().Add(timeout)
	nodes = make([]cli.NodeAudit, len(addrs))
	for i, a := range addrs {
		nodes[i] = cli.NodeAudit{Addr: a}
	}
	for {
		pending := false
		for i := range nodes {
			n := &nodes[i]
			if n.Passed || (n.Error != "" && !n.Reachable) {
				continue
			}
			r, err := cli.FetchReport(ctx, hc, n.Addr, prefix)
			if err != nil {
				if !n.Reachable {
					n.Error = err.Error() // never answered: a node that is gone
				} else {
					pending = true
				}
				continue
			}
			n.Reachable, n.Error = true, ""
			n.Node, n.Group = r.Node, r.Group
			n.Applied, n.Replayed, n.Accounts = r.Applied, r.Replayed, len(r.Balances)
			n.Mismatches = m.check(r)
			if len(n.Mismatches) > 5 {
				n.Mismatches = append(n.Mismatches[:5], fmt.Sprintf("... %d more", len(n.Mismatches)-5))
			}
			n.Passed = len(n.Mismatches) == 0 && r.InFlight == 0
			if !n.Passed {
				pending = true
			}
		}
		if !pending || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	reached := slices.ContainsFunc(nodes, func(n cli.NodeAudit) bool { return n.Reachable })
	passed = reached && !slices.ContainsFunc(nodes, func(n cli.NodeAudit) bool { return n.Reachable && !n.Passed })
	return nodes, passed
}
