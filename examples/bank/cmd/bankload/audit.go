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

// outcome is what a writer was told about a write: applied (nil), refused
// (a declared error: the handler ran and refused), not executed (it never
// ran anywhere), or unknown (it was sent and no answer came).
type outcome int

const (
	applied outcome = iota
	refused
	notExecuted
	unknown
)

var outcomeNames = [...]string{"applied", "refused", "not-executed", "unknown"}

func (o outcome) String() string { return outcomeNames[o] }

func (o outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

func (o *outcome) UnmarshalText(b []byte) error {
	i := slices.Index(outcomeNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("unknown outcome %q", b)
	}
	*o = outcome(i)
	return nil
}

func classify(err error) outcome {
	if err == nil {
		return applied
	}
	var re *runtime.Error
	switch {
	case errors.As(err, &re) && runtime.MaybeExecuted(err):
		return unknown
	case re == nil && declaredError(err) != nil:
		return refused // a declared Fail error, returned as itself
	}
	return notExecuted // the runtime says no node ran it
}

// declaredError returns the service's error err is, or nil.
func declaredError(err error) error {
	for _, d := range declared {
		if errors.Is(err, d.err) {
			return d.err
		}
	}
	return nil
}

// record applies a write's outcome: deltas by account.
func (m *ledgerModel) record(o outcome, deltas ...delta) {
	if o != applied && o != unknown {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range deltas {
		e := m.accounts[d.Account]
		if o == applied {
			e.base += d.Amount
		} else {
			e.uncertain = append(e.uncertain, d.Amount)
		}
	}
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

// auditSpec is what an audit checks, and where.
type auditSpec struct {
	model   *ledgerModel
	writes  []writeRecord // every writer's, merged; nil: balances only
	addrs   []string      // management addresses of the nodes
	prefix  string        // the run's accounts
	timeout time.Duration // for the nodes to converge
	// requireAll fails the audit when a node does not answer, instead of
	// skipping it as a node that is gone.
	requireAll bool
}

// maxExamples bounds the problems listed per node.
const maxExamples = 5

// audit reads every node's balances until each reachable node agrees with
// the model and has nothing in flight, or until the timeout: a node that
// was frozen may still be applying the writes it received meanwhile. A node
// that never answers (killed) is reported, and skipped unless requireAll.
// Then it checks every reachable node's journal against the writes.
func audit(ctx context.Context, hc *http.Client, s auditSpec) auditResult {
	deadline := time.Now().Add(s.timeout)
	nodes := make([]cli.NodeAudit, len(s.addrs))
	balanced := make([]bool, len(s.addrs))
	for i, a := range s.addrs {
		nodes[i] = cli.NodeAudit{Addr: a}
	}
	for {
		pending := false
		for i := range nodes {
			n := &nodes[i]
			if balanced[i] || (n.Error != "" && !n.Reachable && !s.requireAll) {
				continue
			}
			r, err := cli.FetchReport(ctx, hc, n.Addr, s.prefix)
			if err != nil {
				if !n.Reachable {
					n.Error = err.Error() // never answered: a node that is gone
				}
				if n.Reachable || s.requireAll {
					pending = true
				}
				continue
			}
			n.Reachable, n.Error = true, ""
			n.Node, n.Group = r.Node, r.Group
			n.Applied, n.Replayed, n.Accounts = r.Applied, r.Replayed, len(r.Balances)
			n.Mismatches = examples(s.model.check(r))
			balanced[i] = len(n.Mismatches) == 0 && r.InFlight == 0
			if !balanced[i] {
				pending = true
			}
		}
		if !pending || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	byID := make(map[string]*writeRecord, len(s.writes))
	for i := range s.writes {
		byID[s.writes[i].ID] = &s.writes[i]
	}
	res := auditResult{nodes: nodes, passed: true}
	lost, twice, contra := map[string]bool{}, map[string]bool{}, map[string]bool{}
	reached := false
	for i := range nodes {
		n := &nodes[i]
		n.Passed = balanced[i]
		if n.Reachable && s.writes != nil {
			j, err := cli.FetchJournal(ctx, hc, n.Addr)
			if err != nil {
				n.Error, n.Passed = "journal: "+err.Error(), false
			} else {
				l, t, c := checkJournal(n, j, byID)
				addAll(lost, l)
				addAll(twice, t)
				addAll(contra, c)
				n.Passed = n.Passed && n.Lost == 0 && n.AppliedTwice == 0 && n.Contradicting == 0
			}
		}
		reached = reached || n.Reachable
		if !n.Passed && (n.Reachable || s.requireAll) {
			res.passed = false
		}
	}
	res.passed = res.passed && reached
	res.lost, res.twice, res.contradicting = len(lost), len(twice), len(contra)
	return res
}

// auditResult is an audit's verdict; the counts are of distinct writes,
// over every node.
type auditResult struct {
	nodes                      []cli.NodeAudit
	passed                     bool
	lost, twice, contradicting int
}

func addAll(set map[string]bool, ids []string) {
	for _, id := range ids {
		set[id] = true
	}
}

// checkJournal compares a node's journal with the writes: an applied write
// missing is lost (unless the journal forgot entries, which makes absence
// prove nothing), an ID executed more than once was applied twice, and a
// journaled outcome other than the one the writer was told contradicts it.
// It fills in n and returns the IDs of each kind.
func checkJournal(n *cli.NodeAudit, j cli.JournalReport, writes map[string]*writeRecord) (lostIDs, twiceIDs, contraIDs []string) {
	n.JournalChecked, n.JournalEvicted = true, j.Evicted
	seen := make(map[string]bool, len(writes))
	var lost, twice, contra []string
	for _, e := range j.Entries {
		w := writes[e.ID]
		if w == nil {
			continue // another run's
		}
		seen[e.ID] = true
		if e.Runs > 1 {
			twiceIDs = append(twiceIDs, e.ID)
			twice = append(twice, fmt.Sprintf("%s %s executed %d times", w.Method, e.ID, e.Runs))
		}
		var want string
		switch {
		case w.Outcome == applied && (e.Err != "" || e.Amount != w.Amount):
			want = fmt.Sprintf("told balance %d", w.Amount)
		case w.Outcome == refused && e.Err != w.Err:
			want = fmt.Sprintf("told %q", w.Err)
		case w.Outcome == notExecuted:
			want = "told it never ran"
		}
		if want != "" {
			contraIDs = append(contraIDs, e.ID)
			contra = append(contra, fmt.Sprintf("%s %s: %s, node answered balance %d error %q", w.Method, e.ID, want, e.Amount, e.Err))
		}
	}
	if j.Evicted == 0 {
		for id, w := range writes {
			if w.Outcome == applied && !seen[id] {
				lostIDs = append(lostIDs, id)
				lost = append(lost, fmt.Sprintf("%s %s (told balance %d)", w.Method, id, w.Amount))
			}
		}
	}
	n.Lost, n.AppliedTwice, n.Contradicting = len(lost), len(twice), len(contra)
	slices.Sort(lost)
	for _, l := range [][]string{lost, twice, contra} {
		n.Problems = append(n.Problems, examples(l)...)
	}
	return lostIDs, twiceIDs, contraIDs
}

// examples keeps the first few of a list of problems.
func examples(l []string) []string {
	if len(l) > maxExamples {
		return append(l[:maxExamples:maxExamples], fmt.Sprintf("... %d more", len(l)-maxExamples))
	}
	return l
}
