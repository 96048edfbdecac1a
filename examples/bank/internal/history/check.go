package history

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ffgen/ffgen/examples/bank"
)

// Verdict is the answer of a linearizability check.
type Verdict string

const (
	Yes     Verdict = "yes"     // some order of the operations explains every result
	No      Verdict = "no"      // none does
	Unknown Verdict = "unknown" // the check ran out of time or room before it knew
)

// Defaults of Options.
const (
	DefaultTimeout = 2 * time.Minute
	// DefaultMaxPartOps bounds the operations of one independent part:
	// porcupine remembers a bit per operation for every state it has
	// reached, so its memory grows with the square of a part's length
	// (40,000 operations: some 200 MB).
	DefaultMaxPartOps = 40000
)

// Options tune Check.
type Options struct {
	// Initial is the balance of every account that the history uses
	// without opening it: opened before the history began. An account
	// the history opens (or tries to) did not exist before.
	Initial int64
	// Timeout bounds the whole check (DefaultTimeout if 0); past it the
	// verdict is Unknown rather than a wait without end.
	Timeout time.Duration
	// MaxPartOps bounds the operations of one independent part
	// (DefaultMaxPartOps if 0); a larger part is not checked, and the
	// verdict is at best Unknown.
	MaxPartOps int
	// Visualize, if set, names an HTML file that porcupine draws the
	// first part that is not linearizable into.
	Visualize string
}

// Result is the outcome of Check.
type Result struct {
	Verdict Verdict `json:"verdict"`
	Counts          // the whole history's operations
	// Checked operations went into the check. Left out are those that
	// neither changed the ledger nor observed it: reads that failed or
	// are indeterminate, and failed writes whose error says nothing about
	// the ledger (e.g. the runtime's word that no node ran them).
	Checked int `json:"checked"`
	// Parts are the independent parts the history splits into: the
	// accounts linked by the operations that name two of them (transfers),
	// each with the operations on them.
	Parts   int `json:"parts"`
	Largest int `json:"largest_part"` // operations of the largest part
	// Illegal describes the parts that are not linearizable, and Undecided
	// those the check could not decide and why; the first few of each.
	Illegal   []string `json:"illegal,omitempty"`
	Undecided []string `json:"undecided,omitempty"`
	// WritesAlone is, when Verdict is No, the verdict on the same history
	// without its reads: Yes says that the writes agree with each other
	// and a read returned a balance no order explains (a stale read).
	WritesAlone Verdict       `json:"writes_alone,omitempty"`
	Took        time.Duration `json:"took_ns"`
}

// String is the verdict, with its reason when not Yes.
func (r Result) String() string {
	var why []string
	switch r.Verdict {
	case No:
		why = append(why, r.Illegal...)
		switch r.WritesAlone {
		case Yes:
			why = append(why, "the writes alone are linearizable: a read answered a balance no order explains")
		case No:
			why = append(why, "the writes alone are not linearizable either")
		}
	case Unknown:
		why = r.Undecided
	}
	if len(why) == 0 {
		return string(r.Verdict)
	}
	return string(r.Verdict) + " (" + strings.Join(why, "; ") + ")"
}

// maxDescribed bounds the parts Result lists.
const maxDescribed = 3

// Check asks whether the history is linearizable with respect to the bank:
// whether the operations can be put in one order, each taking effect at
// some instant between its invocation and its return, in which every
// result is what a single ledger would have answered. An indeterminate
// write (Info) may take effect at any instant after its invocation or
// never: it is modelled as an operation that never returns, which the
// order may place after every other (where it changes nothing anyone saw).
//
// Operations on disjoint sets of accounts commute, and a history is
// linearizable if and only if each independent part of it is (Herlihy and
// Wing's locality), so the check splits the history by the connected
// components of the accounts that operations name together (transfers)
// and checks the parts one by one.
func Check(ops []Op, o Options) Result {
	start := time.Now()
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxPartOps <= 0 {
		o.MaxPartOps = DefaultMaxPartOps
	}
	res := check(ops, o, time.Now().Add(o.Timeout), true)
	res.Took = time.Since(start)
	return res
}

func check(ops []Op, o Options, deadline time.Time, withReads bool) Result {
	res := Result{Verdict: Yes, Counts: Count(ops)}
	opened := map[string]bool{}
	kept := make([]*Op, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		if op.Kind == Open {
			opened[op.Accounts[0]] = true
		}
		if checked(op) && (withReads || op.Kind.write()) {
			kept = append(kept, op)
		}
	}
	res.Checked = len(kept)
	parts := split(kept)
	res.Parts = len(parts)
	for _, p := range parts {
		res.Largest = max(res.Largest, len(p.ops))
	}

	var mu sync.Mutex
	var illegal []*part
	work := make(chan *part)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(parts)) {
		wg.Go(func() {
			for p := range work {
				v, why := p.check(o, opened, deadline)
				mu.Lock()
				switch v {
				case No:
					illegal = append(illegal, p)
				case Unknown:
					res.Undecided = append(res.Undecided, fmt.Sprintf("%s: %s", p, why))
				}
				mu.Unlock()
			}
		})
	}
	for _, p := range parts {
		mu.Lock()
		stop := len(illegal) > 0
		mu.Unlock()
		if stop {
			break // one illegal part settles it
		}
		work <- p
	}
	close(work)
	wg.Wait()

	slices.Sort(res.Undecided)
	if len(res.Undecided) > maxDescribed {
		res.Undecided = append(res.Undecided[:maxDescribed], fmt.Sprintf("%d more parts undecided", len(res.Undecided)-maxDescribed))
	}
	switch {
	case len(illegal) > 0:
		res.Verdict, res.Undecided = No, nil
		slices.SortFunc(illegal, func(a, b *part) int { return strings.Compare(a.accounts[0], b.accounts[0]) })
		for i, p := range illegal {
			if i == maxDescribed {
				res.Illegal = append(res.Illegal, fmt.Sprintf("%d more parts", len(illegal)-i))
				break
			}
			res.Illegal = append(res.Illegal, p.String()+": not linearizable")
		}
		if o.Visualize != "" {
			if err := illegal[0].visualize(o, opened, deadline); err != nil {
				res.Illegal = append(res.Illegal, "visualization: "+err.Error())
			}
		}
		if withReads && res.Counts.Ops > 0 {
			res.WritesAlone = check(ops, o, deadline, false).Verdict
		}
	case len(res.Undecided) > 0:
		res.Verdict = Unknown
	}
	return res
}

// judged are the errors of the service whose refusal the model can
// confirm or contradict from the balances.
var judged = map[string]bool{
	bank.ErrInsufficientFunds.Error(): true,
	bank.ErrUnknownAccount.Error():    true,
	bank.ErrAccountExists.Error():     true,
	bank.ErrInvalidRequest.Error():    true,
}

// checked reports whether op goes into the check: it changed the ledger,
// may have, or observed it. A failed or indeterminate read observed
// nothing; a failed write whose error the model cannot judge (ErrLedgerBusy,
// the runtime's "not executed") changed nothing and observed nothing.
func checked(op *Op) bool {
	switch {
	case op.Outcome == OK:
		return true
	case op.Outcome == Fail:
		return judged[op.Error]
	}
	return op.Kind.write() // Info
}

// part is an independent part of a history: connected accounts and the
// operations on them.
type part struct {
	accounts []string // sorted
	index    map[string]int
	ops      []*Op
}

func (p *part) String() string {
	names := p.accounts
	if len(names) > 4 {
		names = append(names[:4:4], fmt.Sprintf("… %d accounts", len(p.accounts)))
	}
	return fmt.Sprintf("accounts %s (%d operations)", strings.Join(names, ","), len(p.ops))
}

// split partitions ops by the connected components of the accounts they
// name together.
func split(ops []*Op) []*part {
	parent := map[string]string{}
	var find func(string) string
	find = func(a string) string {
		p, ok := parent[a]
		if !ok {
			parent[a] = a
			return a
		}
		if p == a {
			return a
		}
		root := find(p)
		parent[a] = root
		return root
	}
	for _, op := range ops {
		root := find(op.Accounts[0])
		for _, a := range op.Accounts[1:] {
			if r := find(a); r != root {
				parent[r] = root
			}
		}
	}
	byRoot := map[string]*part{}
	var parts []*part
	for _, op := range ops {
		root := find(op.Accounts[0])
		p := byRoot[root]
		if p == nil {
			p = &part{index: map[string]int{}}
			byRoot[root] = p
			parts = append(parts, p)
		}
		p.ops = append(p.ops, op)
		for _, a := range op.Accounts {
			if _, ok := p.index[a]; !ok {
				p.index[a] = 0
				p.accounts = append(p.accounts, a)
			}
		}
	}
	for _, p := range parts {
		slices.Sort(p.accounts)
		for i, a := range p.accounts {
			p.index[a] = i
		}
	}
	// The largest first: they take the longest.
	slices.SortStableFunc(parts, func(a, b *part) int { return len(b.ops) - len(a.ops) })
	return parts
}

// check runs porcupine on the part, within the deadline.
func (p *part) check(o Options, opened map[string]bool, deadline time.Time) (Verdict, string) {
	if len(p.ops) > o.MaxPartOps {
		return Unknown, fmt.Sprintf("more than %d operations, too many to check", o.MaxPartOps)
	}
	left := time.Until(deadline)
	if left <= 0 {
		return Unknown, "out of time"
	}
	switch porcupine.CheckOperationsTimeout(p.model(o, opened), p.operations(), left) {
	case porcupine.Ok:
		return Yes, ""
	case porcupine.Illegal:
		return No, ""
	}
	return Unknown, "out of time"
}

// visualize draws the part's longest linearizable prefixes into
// o.Visualize.
func (p *part) visualize(o Options, opened map[string]bool, deadline time.Time) error {
	left := time.Until(deadline)
	if left <= 0 {
		return fmt.Errorf("out of time")
	}
	m := p.model(o, opened)
	_, info := porcupine.CheckOperationsVerbose(m, p.operations(), left)
	return porcupine.VisualizePath(m, info, o.Visualize)
}

// operations converts the part's operations for porcupine. An
// indeterminate one never returns.
func (p *part) operations() []porcupine.Operation {
	clients := map[string]int{}
	out := make([]porcupine.Operation, len(p.ops))
	for i, op := range p.ops {
		key := fmt.Sprintf("%s/%d", op.Process, op.Client)
		c, ok := clients[key]
		if !ok {
			c = len(clients)
			clients[key] = c
		}
		in := input{kind: op.Kind, a: p.index[op.Accounts[0]], b: -1, amount: op.Amount}
		if len(op.Accounts) > 1 {
			in.b = p.index[op.Accounts[1]]
		}
		ret := op.Return
		if op.Outcome == Info {
			ret = math.MaxInt64
		}
		out[i] = porcupine.Operation{ClientId: c, Input: in, Call: op.Invoke,
			Output: output{outcome: op.Outcome, balance: op.Balance, err: op.Error}, Return: ret}
	}
	return out
}

// input is an operation's arguments; a and b index the part's accounts
// (b is a transfer's destination, else -1).
type input struct {
	kind   Kind
	a, b   int
	amount int64
}

// output is what the client was told.
type output struct {
	outcome Outcome
	balance int64
	err     string
}

// state is the part's ledger: each account's balance, or absent.
type state []int64

// absent marks an account not opened yet; the ledger's balances are never
// negative.
const absent = math.MinInt64

// model is the bank as one ledger holding the part's accounts.
func (p *part) model(o Options, opened map[string]bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any {
			s := make(state, len(p.accounts))
			for i, a := range p.accounts {
				s[i] = o.Initial
				if opened[a] {
					s[i] = absent
				}
			}
			return s
		},
		Step: func(st, in, out any) (bool, any) {
			return step(st.(state), in.(input), out.(output))
		},
		Equal: func(a, b any) bool { return slices.Equal(a.(state), b.(state)) },
		Hash: func(st any) uint64 {
			h := uint64(14695981039346656037)
			for _, v := range st.(state) {
				h = (h ^ uint64(v)) * 1099511628211
			}
			return h
		},
		DescribeOperation: func(in, out any) string {
			i, r := in.(input), out.(output)
			args := p.accounts[i.a]
			if i.b >= 0 {
				args += " → " + p.accounts[i.b]
			}
			if i.kind != Balance {
				args += fmt.Sprintf(", %d", i.amount)
			}
			switch r.outcome {
			case OK:
				return fmt.Sprintf("%s(%s) → %d", i.kind, args, r.balance)
			case Fail:
				return fmt.Sprintf("%s(%s) → %s", i.kind, args, r.err)
			}
			return fmt.Sprintf("%s(%s) → ?", i.kind, args)
		},
		DescribeState: func(st any) string {
			var parts []string
			for i, v := range st.(state) {
				b := "absent"
				if v != absent {
					b = fmt.Sprint(v)
				}
				parts = append(parts, p.accounts[i]+": "+b)
			}
			return strings.Join(parts, ", ")
		},
	}
}

// step is one operation taking effect on s: whether the answer the client
// was told is the one the ledger gives, and the state after it. An
// indeterminate operation takes effect, whatever it would have answered.
func step(s state, in input, out output) (bool, state) {
	next, bal, err := apply(s, in)
	switch out.outcome {
	case Info:
		return true, next
	case OK:
		return err == nil && bal == out.balance, next
	}
	return err != nil && err.Error() == out.err, s
}

// apply runs one operation as bank.Ledger does: the state after it (s
// itself when unchanged), the balance it answers or its error.
func apply(s state, in input) (state, int64, error) {
	a := s[in.a]
	switch in.kind {
	case Balance:
		if a == absent {
			return s, 0, bank.ErrUnknownAccount
		}
		return s, a, nil
	case Open:
		switch {
		case a != absent:
			return s, 0, bank.ErrAccountExists
		case in.amount < 0:
			return s, 0, bank.ErrInvalidRequest
		}
		return with(s, in.a, in.amount), in.amount, nil
	case Deposit, Withdraw:
		switch {
		case in.amount <= 0:
			return s, 0, bank.ErrInvalidRequest
		case a == absent:
			return s, 0, bank.ErrUnknownAccount
		case in.kind == Deposit && a > math.MaxInt64-in.amount:
			return s, 0, bank.ErrInvalidRequest
		case in.kind == Deposit:
			return with(s, in.a, a+in.amount), a + in.amount, nil
		case a < in.amount:
			return s, 0, bank.ErrInsufficientFunds
		}
		return with(s, in.a, a-in.amount), a - in.amount, nil
	case Transfer:
		if in.amount <= 0 || in.a == in.b {
			return s, 0, bank.ErrInvalidRequest
		}
		b := s[in.b]
		switch {
		case a == absent, b == absent:
			return s, 0, bank.ErrUnknownAccount
		case a < in.amount:
			return s, 0, bank.ErrInsufficientFunds
		case b > math.MaxInt64-in.amount:
			return s, 0, bank.ErrInvalidRequest
		}
		next := with(s, in.a, a-in.amount)
		next[in.b] = b + in.amount
		return next, a - in.amount, nil
	}
	return s, 0, fmt.Errorf("history: no model of %q", in.kind)
}

// with returns a copy of s with account i at v.
func with(s state, i int, v int64) state {
	next := slices.Clone(s)
	next[i] = v
	return next
}
