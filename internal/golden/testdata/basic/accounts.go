// Package basic is the bank example of the design: every directive once.
package basic

import (
	"context"
	"errors"
	"fmt"
)

//go:generate ffgen

// Accounts is a ledger of bank accounts.
//
//ff:service
//ff:default fail                      // unlisted errors: fail (default) or failover
type Accounts interface {
	// Withdraw takes money out of an account.
	//ff:entity req.AccountID              // path into a parameter
	//ff:fail ErrInsufficientFunds *NotFoundError
	//ff:failover ErrLedgerBusy
	//ff:timeout attempt=2s operation=4s heartbeat=300ms failovers=2
	Withdraw(ctx context.Context, req WithdrawRequest) (Balance, error)

	// Close closes an account once nothing else runs on it.
	//ff:entity id
	//ff:hold
	Close(ctx context.Context, id AccountID) error

	//ff:entity req.AccountID
	//ff:scatter
	Deposit(ctx context.Context, req DepositRequest) (Balance, error)

	//ff:entity req.From req.To
	//ff:scatter
	Transfer(ctx context.Context, req TransferRequest) (Balance, error)

	//ff:entity id
	//ff:hedge 20ms
	//ff:linearizable                      // sees every write acknowledged before the call
	Balance(ctx context.Context, id AccountID) (Balance, error)
}

// AccountID names an account.
type AccountID string

// Money is an amount in cents.
type Money int64

type WithdrawRequest struct {
	AccountID AccountID
	Amount    Money
}

type DepositRequest struct {
	AccountID AccountID
	Amount    Money
}

type TransferRequest struct {
	From, To AccountID
	Amount   Money
}

// Balance is the state of an account after an operation.
type Balance struct {
	AccountID AccountID
	Amount    Money
	History   []Money
}

var (
	ErrInsufficientFunds = errors.New("insufficient funds")
	ErrLedgerBusy        = errors.New("ledger busy")
)

// NotFoundError reports an unknown account.
type NotFoundError struct {
	ID AccountID
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("account %s not found", e.ID) }
