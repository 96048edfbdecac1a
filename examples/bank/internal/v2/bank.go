// Package bank is the next version of the bank example's Accounts service
// (package github.com/ffgen/ffgen/examples/bank), as a team would ship it
// during a rolling deploy, with a change of each kind the codec absorbs:
// Balance gains a field (Currency) and loses one (AccountID, whose number
// stays reserved), TransferRequest gains a field in the middle (Memo) and
// carries Reference as bytes rather than a string, OpenRequest.Initial is
// widened from an int32 to an int64, Accounts gains a method (Exists),
// and Balance and Exists a declared error (ErrInvalidID). Its generated code was generated from the first
// version's (the recorded schema keeps the field numbers), and banknode
// and bankload built with -tags bankv2 serve and call it: the
// mixed-version test runs both versions in one cluster. It implements the
// service over the first version's ledger, so that both versions apply
// the writes alike.
package bank

import (
	"context"
	"errors"

	v1 "github.com/ffgen/ffgen/examples/bank"
)

//go:generate go tool ffgen

// Accounts is a ledger of bank accounts, replicated on every node: writes
// go through the raft group that every node applies them from, reads go to
// one node and fail over.
//
//ff:service
//ff:default fail
type Accounts interface {
	// Open creates an account holding req.Initial.
	//
	//ff:entity req.AccountID
	//ff:scatter
	//ff:fail ErrAccountExists ErrAccountClosed ErrInvalidRequest
	Open(ctx context.Context, req OpenRequest) (Balance, error)

	// Deposit adds req.Amount to an open account.
	//
	//ff:entity req.AccountID
	//ff:scatter
	//ff:fail ErrUnknownAccount ErrAccountClosed ErrInvalidRequest
	Deposit(ctx context.Context, req DepositRequest) (Balance, error)

	// Withdraw takes req.Amount out of an open account that holds at
	// least that much.
	//
	//ff:entity req.AccountID
	//ff:scatter
	//ff:fail ErrInsufficientFunds ErrUnknownAccount ErrAccountClosed ErrInvalidRequest
	Withdraw(ctx context.Context, req WithdrawRequest) (Balance, error)

	// Transfer moves req.Amount from one open account to another and
	// returns the source account's balance.
	//
	//ff:entity req.From req.To
	//ff:scatter
	//ff:fail ErrInsufficientFunds ErrUnknownAccount ErrAccountClosed ErrInvalidRequest
	Transfer(ctx context.Context, req TransferRequest) (Balance, error)

	// Balance returns an account's balance with every write acknowledged
	// before the call. New in this version: ErrInvalidID for an empty ID.
	//
	//ff:entity id
	//ff:linearizable
	//ff:fail ErrUnknownAccount ErrInvalidID
	//ff:failover ErrLedgerBusy
	Balance(ctx context.Context, id string) (Balance, error)

	// Close closes an empty account once no operation on it is running.
	//
	//ff:entity id
	//ff:hold
	//ff:fail ErrUnknownAccount ErrAccountClosed ErrBalanceNotZero
	//ff:failover ErrLedgerBusy
	Close(ctx context.Context, id string) error

	// Exists reports whether the account was opened (new in this version).
	//
	//ff:entity id
	//ff:fail ErrInvalidID
	//ff:failover ErrLedgerBusy
	Exists(ctx context.Context, id string) (bool, error)
}

// OpenRequest opens an account.
type OpenRequest struct {
	AccountID string
	// Initial is widened in this version (an int32 in the first): while
	// a voter of the first version remains, the leader refuses an Open
	// whose Initial does not fit an int32 (runtime.ErrVotersCannotApply)
	// rather than have that voter fail to apply it.
	Initial int64 // in cents, zero or more
}

// DepositRequest adds money to an account.
type DepositRequest struct {
	AccountID string
	Amount    int64 // in cents, positive
}

// WithdrawRequest takes money out of an account.
type WithdrawRequest struct {
	AccountID string
	Amount    int64 // in cents, positive
}

// TransferRequest moves money between two different accounts.
type TransferRequest struct {
	From, To string
	// Memo is new in this version, a note to the payee that the ledger
	// does not keep. While a voter of the first version remains, a
	// transfer that sets it is refused (runtime.ErrVotersCannotApply: that
	// voter would skip it); one that leaves it empty goes through.
	Memo   string
	Amount int64 // in cents, positive
	// Reference is the first version's string, carried as bytes: the
	// wire holds both alike.
	Reference []byte
}

// Balance is an account's balance after an operation.
//
// AccountID is gone in this version (the caller knows which account it
// asked about): its number stays reserved, and a client of the first
// version gets it empty from a node of this one.
type Balance struct {
	Amount int64 // in cents
	// Currency is new in this version: a node of the first version does
	// not send it, and its clients skip it.
	Currency string
}

// Currency is what this version's Balance says.
const Currency = "EUR"

// The errors of the first version, and ErrInvalidID.
var (
	ErrInsufficientFunds = v1.ErrInsufficientFunds
	ErrUnknownAccount    = v1.ErrUnknownAccount
	ErrAccountClosed     = v1.ErrAccountClosed
	ErrAccountExists     = v1.ErrAccountExists
	ErrBalanceNotZero    = v1.ErrBalanceNotZero
	ErrInvalidRequest    = v1.ErrInvalidRequest
	ErrLedgerBusy        = v1.ErrLedgerBusy
	// ErrInvalidID is new in this version: a client of the first version
	// gets it as a RemoteError whose Code names it.
	ErrInvalidID = errors.New("bank: invalid account ID")
)
