package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
)

// Small hand-made histories, with times in ticks. Accounts x and y start
// at 100 (opened before the history) unless an op opens them.

func ok(client int, kind Kind, accounts string, amount, invoke, ret, balance int64) Op {
	return Op{Process: "p", Client: client, Kind: kind, Accounts: strings.Split(accounts, ","), Amount: amount,
		Invoke: invoke, Return: ret, Outcome: OK, Balance: balance}
}

func failed(client int, kind Kind, accounts string, amount, invoke, ret int64, err error) Op {
	return Op{Process: "p", Client: client, Kind: kind, Accounts: strings.Split(accounts, ","), Amount: amount,
		Invoke: invoke, Return: ret, Outcome: Fail, Error: err.Error()}
}

func info(client int, kind Kind, accounts string, amount, invoke, ret int64) Op {
	return Op{Process: "p", Client: client, Kind: kind, Accounts: strings.Split(accounts, ","), Amount: amount,
		Invoke: invoke, Return: ret, Outcome: Info, Error: "deadline exceeded"}
}

func read(client int, account string, invoke, ret, balance int64) Op {
	return ok(client, Balance, account, 0, invoke, ret, balance)
}

var opts = Options{Initial: 100, Timeout: 10 * time.Second}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []Op
		want Verdict
	}{
		{"linearizable, concurrent writers and reads", []Op{
			ok(0, Deposit, "x", 10, 1, 5, 110),
			ok(1, Withdraw, "x", 30, 2, 6, 80), // overlaps the deposit: ran after it
			read(2, "x", 3, 4, 110),            // between them
			ok(0, Transfer, "x,y", 50, 7, 8, 30),
			read(1, "y", 9, 10, 150),
			failed(2, Withdraw, "x", 31, 11, 12, bank.ErrInsufficientFunds),
			read(2, "x", 13, 14, 30),
		}, Yes},
		{"opened in the history", []Op{
			ok(0, Open, "z", 7, 1, 2, 7),
			failed(1, Deposit, "w", 5, 1, 2, bank.ErrUnknownAccount), // w never opened... but opened later
			ok(1, Open, "w", 0, 3, 4, 0),
			ok(0, Deposit, "z", 3, 3, 4, 10),
		}, Yes},
		{"a lost acknowledged write", []Op{
			ok(0, Deposit, "x", 10, 1, 2, 110),
			ok(1, Deposit, "x", 5, 3, 4, 105), // as if the first never happened
		}, No},
		{"an acknowledged write lost to a later read", []Op{
			ok(0, Deposit, "x", 10, 1, 2, 110),
			read(1, "x", 3, 4, 100),
		}, No},
		{"a doubled write", []Op{
			ok(0, Deposit, "x", 10, 1, 2, 110),
			read(1, "x", 3, 4, 120), // applied twice
		}, No},
		{"a doubled transfer", []Op{
			ok(0, Transfer, "x,y", 10, 1, 2, 90),
			read(1, "y", 3, 4, 120),
		}, No},
		{"a stale read after an acknowledged write", []Op{
			ok(0, Withdraw, "x", 40, 1, 2, 60),
			read(1, "x", 3, 4, 60),
			read(2, "x", 5, 6, 100), // a replica that has not seen the withdrawal
		}, No},
		{"a refusal the balance does not explain", []Op{
			failed(0, Withdraw, "x", 50, 1, 2, bank.ErrInsufficientFunds),
		}, No},
		{"an indeterminate write that applied", []Op{
			info(0, Deposit, "x", 10, 1, 2),
			read(1, "x", 3, 4, 110),
			ok(1, Withdraw, "x", 5, 5, 6, 105),
		}, Yes},
		{"an indeterminate write that did not apply", []Op{
			info(0, Deposit, "x", 10, 1, 2),
			read(1, "x", 3, 4, 100),
			ok(1, Withdraw, "x", 5, 5, 6, 95),
		}, Yes},
		{"an indeterminate write that applied late", []Op{
			info(0, Transfer, "x,y", 10, 1, 2),
			read(1, "x", 3, 4, 100),
			read(1, "x", 5, 6, 90), // it took effect after the first read
		}, Yes},
		{"an indeterminate write that applied, then did not", []Op{
			info(0, Deposit, "x", 10, 1, 2),
			read(1, "x", 3, 4, 110),
			read(1, "x", 5, 6, 100),
		}, No},
		{"an indeterminate write seen before its invocation", []Op{
			read(1, "x", 1, 2, 110),
			info(0, Deposit, "x", 10, 3, 4),
		}, No},
		{"failed and indeterminate reads say nothing", []Op{
			{Process: "p", Kind: Balance, Accounts: []string{"x"}, Invoke: 1, Return: 2, Outcome: Info, Error: "timeout"},
			{Process: "p", Kind: Balance, Accounts: []string{"x"}, Invoke: 1, Return: 2, Outcome: Fail, Error: "not executed"},
			{Process: "p", Kind: Deposit, Accounts: []string{"x"}, Amount: 9, Invoke: 1, Return: 2, Outcome: Fail, Error: "no node ran it"},
			read(1, "x", 3, 4, 100),
		}, Yes},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Check(c.ops, opts)
			if r.Verdict != c.want {
				t.Errorf("verdict %s, want %s", r, c.want)
			}
		})
	}
}

// Parts: operations on unrelated accounts are checked apart, transfers
// join their accounts into one part, and a stale read is told from writes
// that contradict each other.
func TestCheckSplitsAndExplains(t *testing.T) {
	ops := []Op{
		ok(0, Deposit, "a", 1, 1, 2, 101),
		ok(0, Transfer, "b,c", 1, 1, 2, 99),
		ok(1, Transfer, "c,d", 1, 3, 4, 100),
		read(2, "e", 1, 2, 100),
		read(2, "e", 3, 4, 100),
	}
	r := Check(ops, opts)
	if r.Verdict != Yes || r.Parts != 3 || r.Largest != 2 || r.Checked != 5 || r.Ops != 5 {
		t.Errorf("got %+v; want yes in 3 parts, the largest of 2", r)
	}
	stale := append(ops, read(3, "d", 5, 6, 100)) // d holds 101 since tick 4
	r = Check(stale, opts)
	if r.Verdict != No || r.WritesAlone != Yes || !strings.Contains(r.String(), "accounts b,c,d") || !strings.Contains(r.String(), "a read answered") {
		t.Errorf("stale read: %s", r)
	}
	lost := append(ops, ok(3, Deposit, "a", 1, 5, 6, 101))
	if r := Check(lost, opts); r.Verdict != No || r.WritesAlone != No {
		t.Errorf("lost write: %s", r)
	}
}

// A check that cannot finish in time says Unknown, and so does a part too
// large for it.
func TestCheckIsBounded(t *testing.T) {
	var ops []Op
	// Many indeterminate deposits of 1 all in flight together, then a read
	// that no subset explains: porcupine tries a great many orders.
	for i := range 40 {
		ops = append(ops, info(i, Deposit, "x", 1, 1, 2))
	}
	ops = append(ops, read(99, "x", 3, 4, 1000))
	r := Check(ops, Options{Initial: 100, Timeout: 200 * time.Millisecond})
	if r.Verdict != Unknown || r.Took > 5*time.Second {
		t.Errorf("got %s after %v, want unknown soon after 200ms", r, r.Took)
	}
	r = Check([]Op{read(0, "x", 1, 2, 100), read(0, "x", 3, 4, 100)}, Options{Initial: 100, MaxPartOps: 1})
	if r.Verdict != Unknown || !strings.Contains(r.String(), "too many") {
		t.Errorf("part over the bound: %s", r)
	}
}

// A long history of a busy run, of the shape bankload makes (transfers
// between the accounts of a pair), checks in reasonable time. The search
// grows fast with the accounts of a part while indeterminate writes are
// pending: on this history, pairs take a fraction of a second, groups of
// four some ten seconds, groups of eight longer than a minute.
func TestCheckLongHistory(t *testing.T) {
	ops := synthetic(20000, 40, 2, 8)
	r := Check(ops, Options{Initial: 5000, Timeout: time.Minute})
	if r.Verdict != Yes || r.Parts != 20 {
		t.Fatalf("got %s in %d parts", r, r.Parts)
	}
	t.Logf("%d operations in %d parts, the largest %d: %v", r.Ops, r.Parts, r.Largest, r.Took)
}

// synthetic runs n operations of callers concurrent clients against one
// sequential ledger, transfers within groups of group accounts, each
// operation taking effect at an instant inside its interval; one in 50
// writes is indeterminate, and half of those never apply.
func synthetic(n, accounts, group, callers int) []Op {
	s := make(state, accounts)
	for i := range s {
		s[i] = 5000
	}
	name := func(i int) string { return fmt.Sprintf("r-%05d", i) }
	var ops []Op
	now := int64(0)
	seed := uint64(1)
	rnd := func(k int) int { seed = seed*6364136223846793005 + 1442695040888963407; return int(seed>>33) % k }
	// Each op occupies [invoke, ret]; ops of different callers overlap as
	// their intervals are stretched around the instant they take effect.
	for i := range n {
		now += 10
		a := rnd(accounts)
		in := input{a: a, b: -1, amount: int64(1 + rnd(500))}
		op := Op{Process: "p", Client: i % callers, Accounts: []string{name(a)}, Amount: in.amount,
			Invoke: now - int64(rnd(25)), Return: now + int64(rnd(25))}
		switch rnd(10) {
		case 0, 1, 2, 3:
			in.kind, in.amount, op.Amount = Balance, 0, 0
		case 4, 5:
			in.kind = Deposit
		case 6, 7:
			in.kind = Withdraw
		default:
			in.kind = Transfer
			g := a / group * group
			b := g + rnd(group)
			for b == a {
				b = g + rnd(group)
			}
			in.b = b
			op.Accounts = append(op.Accounts, name(b))
		}
		op.Kind = in.kind
		if in.kind != Balance && rnd(50) == 0 {
			op.Outcome, op.Error = Info, "deadline exceeded"
			if rnd(2) == 0 {
				ops = append(ops, op) // never applied
				continue
			}
		}
		next, bal, err := apply(s, in)
		s = next
		switch {
		case op.Outcome == Info:
		case err != nil:
			op.Outcome, op.Error = Fail, err.Error()
		default:
			op.Outcome, op.Balance = OK, bal
		}
		ops = append(ops, op)
	}
	return ops
}

func TestCheckVisualizesTheFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.html")
	o := opts
	o.Visualize = path
	r := Check([]Op{ok(0, Deposit, "x", 10, 1, 2, 110), read(1, "x", 3, 4, 100)}, o)
	if r.Verdict != No {
		t.Fatalf("verdict %s", r)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "deposit(x, 10)") {
		t.Errorf("visualization: %v", err)
	}
}
