package main

import (
	"context"
	"errors"
	"testing"

	"github.com/ffgen/ffgen/examples/bank"
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
