package main

import (
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	bank "github.com/ffgen/ffgen/examples/bank/internal/accounts"
	"github.com/ffgen/ffgen/examples/bank/internal/history"
	"github.com/ffgen/ffgen/runtime"
)

// opKind is what a caller does next.
type opKind int

const (
	opBalance opKind = iota
	opDeposit
	opWithdraw
	opTransfer
	numKinds
)

var kindNames = [numKinds]string{"Balance", "Deposit", "Withdraw", "Transfer"}

// declared are the service's errors, by name, for the summary.
var declared = []struct {
	name string
	err  error
}{
	{"ErrInsufficientFunds", bank.ErrInsufficientFunds},
	{"ErrUnknownAccount", bank.ErrUnknownAccount},
	{"ErrAccountClosed", bank.ErrAccountClosed},
	{"ErrAccountExists", bank.ErrAccountExists},
	{"ErrBalanceNotZero", bank.ErrBalanceNotZero},
	{"ErrInvalidRequest", bank.ErrInvalidRequest},
	{"ErrLedgerBusy", bank.ErrLedgerBusy},
}

// errorKind names an error for the summary: a declared error's name, or
// the reason a *runtime.Error ended the operation.
func errorKind(err error) (kind string, timeout bool) {
	for _, d := range declared {
		if errors.Is(err, d.err) {
			return d.name, false
		}
	}
	var re *runtime.Error
	if errors.As(err, &re) {
		return re.Reason.String(), errors.Is(err, context.DeadlineExceeded)
	}
	return "other", false
}

// live are the counters the progress line reads while callers run.
type live struct {
	// declared counts the service's own answers (ErrInsufficientFunds,
	// say), failed every other error: a timeout, a refusal, a failure.
	ops, declared, failed, timeouts, failovers atomic.Uint64
	maxNs                                      atomic.Int64 // the slowest operation since the last progress line
}

func (l *live) observe(d time.Duration) {
	for {
		cur := l.maxNs.Load()
		if int64(d) <= cur || l.maxNs.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// tally is one caller's record, merged into the summary at the end.
type tally struct {
	ops, ok       uint64
	latencies     []time.Duration           // every operation
	admitted      [numKinds][]time.Duration // every operation but those refused unrun, by kind
	refusals      map[string]uint64
	byKind        [numKinds]uint64
	errors        map[string]uint64
	timeouts      uint64
	uncertain     uint64
	failed        uint64          // ended in an error other than uncertain or ErrInsufficientFunds
	failoverLat   []time.Duration // reads that failed over (each caller reading through a client of its own)
	failoverLatBy map[string][]time.Duration
	overdue       uint64 // operations that outlived the deadline plus margin
	// newMethods counts the calls of what this client's version of the
	// service added (accounts.NewMethods), by outcome.
	newMethods map[string]uint64
}

func newTally() *tally {
	return &tally{errors: map[string]uint64{}, refusals: map[string]uint64{}, failoverLatBy: map[string][]time.Duration{},
		newMethods: map[string]uint64{}}
}

// caller runs operations until stop says so.
type caller struct {
	accounts []string
	writes   *bank.AccountsClient
	reads    *bank.AccountsClient // with probe attached
	probe    *probe
	// ownReads: reads is this caller's alone, so that its probe
	// attributes each failover to the read that paid for it.
	ownReads bool
	log      *writeLog
	hist     *history.Recorder // nil: no -history
	client   int               // this caller's number in the history
	live     *live
	t        *tally
	rng      *rand.Rand
	maxWait  time.Duration // operation timeout plus margin
	readPct  int
	group    int // transfers stay within groups of this many accounts (0: any two)
	backoff  int // refusals in a row, up to maxBackoffDoublings
}

// maxBackoffDoublings bounds a caller's backoff after refusals in a row to
// 2^(maxBackoffDoublings-1) times the node's hint.
const maxBackoffDoublings = 6

// jitter returns a random duration in [d/2, d), so that callers refused
// together do not come back together.
func (c *caller) jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(c.rng.Int64N(int64(d/2)+1))
}

func (c *caller) run(next func() bool) {
	for next() {
		c.one()
	}
}

func (c *caller) amount() int64 { return 1 + c.rng.Int64N(500) }

// partner returns the account a transfer from account i goes to: another
// of its group (the last group takes in a lone account left over), or any
// other with no groups. Groups keep the history in independent parts, each
// small enough for the linearizability check.
func (c *caller) partner(i int) int {
	lo, hi := 0, len(c.accounts)
	if g := c.group; g > 0 && g < len(c.accounts) {
		lo = i / g * g
		if len(c.accounts)-lo < 2 {
			lo -= g
		}
		hi = min(lo+g, len(c.accounts))
		if len(c.accounts)-hi < 2 {
			hi = len(c.accounts)
		}
	}
	to := lo + c.rng.IntN(hi-lo)
	for to == i {
		to = lo + c.rng.IntN(hi-lo)
	}
	return to
}

func (c *caller) pick() opKind {
	if c.rng.IntN(100) < c.readPct {
		return opBalance
	}
	return opKind(1 + c.rng.IntN(int(numKinds)-1))
}

// one runs one operation and records its outcome. Its context is never
// cancelled, so that stopping the load never turns an operation into an
// uncertain one; the runtime bounds each by its deadline. Each write goes
// out under an operation ID of its own choosing, so that the audit can find
// it in every node's journal.
func (c *caller) one() {
	id := newOpID()
	ctx := runtime.WithOperationID(context.Background(), id)
	kind := c.pick()
	ai := c.rng.IntN(len(c.accounts))
	a := c.accounts[ai]
	amt := c.amount()
	op := history.Op{Client: c.client, ID: hex.EncodeToString(id[:]), Accounts: []string{a}, Amount: amt}
	op.Invoke = history.Now()
	start := time.Now()
	var err error
	var b bank.Balance
	var deltas []delta
	switch kind {
	case opBalance:
		op.Kind, op.Amount = history.Balance, 0
		b, err = c.reads.Balance(ctx, a)
	case opDeposit:
		op.Kind = history.Deposit
		b, err = c.writes.Deposit(ctx, bank.DepositRequest{AccountID: a, Amount: amt})
		deltas = []delta{{a, amt}}
	case opWithdraw:
		op.Kind = history.Withdraw
		b, err = c.writes.Withdraw(ctx, bank.WithdrawRequest{AccountID: a, Amount: amt})
		deltas = []delta{{a, -amt}}
	case opTransfer:
		to := c.accounts[c.partner(ai)]
		op.Kind, op.Accounts = history.Transfer, append(op.Accounts, to)
		b, err = c.writes.Transfer(ctx, bank.Transfer(a, to, amt, op.ID[:8]))
		deltas = []delta{{a, -amt}, {to, amt}}
	}
	// The call's time ends here: what follows is this program's own
	// bookkeeping, under locks every caller shares (the write log's,
	// whose slice of a few hundred thousand records is copied under it
	// now and then, and the history's), and at 1,024 callers waiting for
	// them was part of every call's latency.
	d := time.Since(start)
	op.Return = history.Now()
	if deltas != nil {
		c.log.add(id, kindNames[kind], b.Amount, err, deltas...)
	}
	if kind == opBalance && err == nil {
		c.newMethods(a)
	}
	op.Outcome, op.Balance, op.Error = historyOutcome(b, err)
	c.hist.Record(op)
	t := c.t
	t.ops++
	t.byKind[kind]++
	t.latencies = append(t.latencies, d)
	if k, ok := refusal(err); ok {
		t.refusals[k]++
		if d, ok := runtime.RetryAfter(err); ok {
			// Back off as the node asked, and longer each time it asks
			// again, as gRPC's retry policy backs off: a caller that
			// comes back at once only keeps it busy refusing, and 1024
			// callers that come back after each hint keep the node, or
			// their own process, busy refusing them.
			c.backoff = min(c.backoff+1, maxBackoffDoublings)
			time.Sleep(c.jitter(d << (c.backoff - 1)))
		}
	} else {
		c.backoff = 0
		t.admitted[kind] = append(t.admitted[kind], d)
	}
	if d > c.maxWait {
		t.overdue++
	}
	c.live.ops.Add(1)
	c.live.observe(d)
	uncertain := kind != opBalance && classify(err) == unknown
	if uncertain {
		t.uncertain++
	} else if err != nil && !errors.Is(err, bank.ErrInsufficientFunds) {
		t.failed++
	}
	if err == nil {
		t.ok++
	} else {
		k, timeout := errorKind(err)
		t.errors[kindNames[kind]+": "+k]++
		if re := (*runtime.Error)(nil); errors.As(err, &re) {
			c.live.failed.Add(1)
		} else {
			c.live.declared.Add(1)
		}
		if timeout {
			t.timeouts++
			c.live.timeouts.Add(1)
		}
	}
	if kind == opBalance && c.ownReads {
		if fo := c.probe.take(); len(fo) > 0 {
			t.failoverLat = append(t.failoverLat, d)
			first := fo[0].String()
			t.failoverLatBy[first] = append(t.failoverLatBy[first], d)
		}
	}
}

// newMethods calls what this client's version of the service added
// (accounts.NewMethods) on account a, which a read just found, and counts
// the outcome: during a rollout a method no node reached serves yet is
// refused as not implemented, anything else that fails counts as failed.
func (c *caller) newMethods(a string) {
	called, err := bank.NewMethods(context.Background(), c.reads, a)
	switch {
	case !called:
	case err == nil:
		c.t.newMethods["ok"]++
	case errors.Is(err, runtime.ErrUnimplemented) && !runtime.MaybeExecuted(err):
		c.t.newMethods["unimplemented"]++
	default:
		c.t.newMethods["failed"]++
		c.t.failed++
		c.t.errors["new methods: "+err.Error()]++
	}
}

// refusal names an error that says no node ran the operation (it was
// refused, or never delivered): the kind for the summary, and true.
func refusal(err error) (string, bool) {
	var re *runtime.Error
	if err == nil || !errors.As(err, &re) || runtime.MaybeExecuted(err) {
		return "", false
	}
	if errors.Is(err, runtime.ErrOverloaded) {
		return "overloaded", true
	}
	return re.Reason.String(), true
}

// historyOutcome is how the history records an operation that returned b
// and err: ok with the balance; fail when it certainly changed nothing (the
// service refused it with one of its errors, or the runtime says no node
// ran it); info when the client cannot know whether it applied.
func historyOutcome(b bank.Balance, err error) (history.Outcome, int64, string) {
	if err == nil {
		return history.OK, b.Amount, ""
	}
	var re *runtime.Error
	switch o := classify(err); {
	case o == refused:
		return history.Fail, 0, declaredError(err).Error()
	case o == notExecuted && errors.As(err, &re):
		return history.Fail, 0, err.Error()
	}
	return history.Info, 0, err.Error()
}
