package bank

import (
	"context"
	"errors"
	"math"

	v1 "github.com/ffgen/ffgen/examples/bank"
)

// Ledger serves this version of Accounts over the first version's ledger:
// the writes are the first version's, so a cluster that runs both applies
// every write alike on every replica.
type Ledger struct{ *v1.Ledger }

var (
	_ Accounts = Ledger{}
)

func balance(b v1.Balance, err error) (Balance, error) {
	return Balance{Amount: b.Amount, Currency: Currency}, err
}

func (l Ledger) Open(ctx context.Context, req OpenRequest) (Balance, error) {
	// The ledger underneath is the first version's, whose opening
	// balances are int32s.
	if req.Initial > math.MaxInt32 {
		return Balance{}, ErrInvalidRequest
	}
	return balance(l.Ledger.Open(ctx, v1.OpenRequest{AccountID: req.AccountID, Initial: int32(req.Initial)}))
}

func (l Ledger) Deposit(ctx context.Context, req DepositRequest) (Balance, error) {
	return balance(l.Ledger.Deposit(ctx, v1.DepositRequest(req)))
}

func (l Ledger) Withdraw(ctx context.Context, req WithdrawRequest) (Balance, error) {
	return balance(l.Ledger.Withdraw(ctx, v1.WithdrawRequest(req)))
}

func (l Ledger) Transfer(ctx context.Context, req TransferRequest) (Balance, error) {
	return balance(l.Ledger.Transfer(ctx, v1.TransferRequest{From: req.From, To: req.To, Amount: req.Amount, Reference: string(req.Reference)}))
}

func (l Ledger) Balance(ctx context.Context, id string) (Balance, error) {
	if id == "" {
		return Balance{}, ErrInvalidID
	}
	return balance(l.Ledger.Balance(ctx, id))
}

func (l Ledger) Exists(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, ErrInvalidID
	}
	_, err := l.Ledger.Balance(ctx, id)
	switch {
	case err == nil, errors.Is(err, v1.ErrAccountClosed):
		return true, nil
	case errors.Is(err, v1.ErrUnknownAccount):
		return false, nil
	}
	return false, err
}
