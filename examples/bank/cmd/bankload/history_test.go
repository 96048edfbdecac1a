package main

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"testing"

	bank "github.com/ffgen/ffgen/examples/bank/internal/accounts"
	"github.com/ffgen/ffgen/examples/bank/internal/history"
	"github.com/ffgen/ffgen/runtime"
)

// The history says ok only with a result, fail only when the operation
// certainly changed nothing, and info whenever the client cannot know.
func TestHistoryOutcome(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		want    history.Outcome
		balance int64
		errText string
	}{
		{"success", nil, history.OK, 42, ""},
		{"declared error", bank.ErrInsufficientFunds, history.Fail, 0, bank.ErrInsufficientFunds.Error()},
		{"never sent", &runtime.Error{Delivery: runtime.NotDelivered, Err: context.DeadlineExceeded}, history.Fail, 0, ""},
		{"sent, timed out", &runtime.Error{Delivery: runtime.Delivered, Err: context.DeadlineExceeded}, history.Info, 0, ""},
		{"acknowledged, no answer", &runtime.Error{Delivery: runtime.Acknowledged}, history.Info, 0, ""},
		{"an error nobody declared", errors.New("strange"), history.Info, 0, "strange"},
	} {
		o, b, e := historyOutcome(bank.Balance{Amount: 42}, c.err)
		if o != c.want || b != c.balance || (c.errText != "" && e != c.errText) || (c.err != nil && e == "") {
			t.Errorf("%s: got %s %d %q, want %s %d %q", c.name, o, b, e, c.want, c.balance, c.errText)
		}
	}
}

// Transfers stay within groups of accounts, a lone account left over
// joining the last group, so that the accounts fall apart into
// independent parts of the history.
func TestPartnerStaysInGroup(t *testing.T) {
	for _, c := range []struct{ accounts, group, wantParts int }{
		{10, 2, 5}, {5, 2, 2}, {3, 2, 1}, {7, 3, 2}, {10, 0, 1}, {4, 8, 1},
	} {
		cr := &caller{accounts: make([]string, c.accounts), group: c.group, rng: mrand.New(mrand.NewPCG(1, 2))}
		parent := make([]int, c.accounts)
		for i := range parent {
			parent[i] = i
		}
		var find func(int) int
		find = func(i int) int {
			if parent[i] != i {
				parent[i] = find(parent[i])
			}
			return parent[i]
		}
		for range 50 {
			for i := range c.accounts {
				to := cr.partner(i)
				if to == i || to < 0 || to >= c.accounts {
					t.Fatalf("%+v: partner(%d) = %d", c, i, to)
				}
				parent[find(i)] = find(to)
			}
		}
		roots := map[int]bool{}
		for i := range parent {
			roots[find(i)] = true
		}
		if len(roots) != c.wantParts {
			t.Errorf("%+v: %d parts, want %d", c, len(roots), c.wantParts)
		}
	}
}
