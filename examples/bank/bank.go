package bank

import (
	"context"
	"errors"
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
	// returns the source account's balance. It is serialized with every
	// other operation on both accounts.
	//
	//ff:entity req.From req.To
	//ff:scatter
	//ff:fail ErrInsufficientFunds ErrUnknownAccount ErrAccountClosed ErrInvalidRequest
	Transfer(ctx context.Context, req TransferRequest) (Balance, error)

	// Balance returns an account's balance with every write acknowledged
	// before the call, whichever node answers: the node first makes sure,
	// with the leader, that it has applied them.
	//
	//ff:entity id
	//ff:linearizable
	//ff:fail ErrUnknownAccount
	//ff:failover ErrLedgerBusy
	Balance(ctx context.Context, id string) (Balance, error)

	// Close closes an empty account once no operation on it is running;
	// later writes to it fail with ErrAccountClosed. Close runs on one
	// node only (a held operation cannot be scattered), so the other
	// replicas still see the account open: close an account only when
	// nothing will write to it again.
	//
	//ff:entity id
	//ff:hold
	//ff:fail ErrUnknownAccount ErrAccountClosed ErrBalanceNotZero
	//ff:failover ErrLedgerBusy
	Close(ctx context.Context, id string) error
}

// OpenRequest opens an account.
type OpenRequest struct {
	AccountID string
	Initial   int32 // in cents, zero or more
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
	Amount   int64 // in cents, positive
	// Reference is the payer's reference for the transfer, for its
	// caller's records; the ledger does not keep it.
	Reference string
}

// Balance is an account's balance after an operation.
type Balance struct {
	AccountID string
	Amount    int64 // in cents
}

// Errors of the Accounts service. All but ErrLedgerBusy are final: the
// caller gets them back as themselves (errors.Is works across the wire).
var (
	ErrInsufficientFunds = errors.New("bank: insufficient funds")
	ErrUnknownAccount    = errors.New("bank: unknown account")
	ErrAccountClosed     = errors.New("bank: account closed")
	ErrAccountExists     = errors.New("bank: account already exists")
	ErrBalanceNotZero    = errors.New("bank: balance is not zero")
	ErrInvalidRequest    = errors.New("bank: invalid request")
	// ErrLedgerBusy means this node cannot serve now (it is draining);
	// the client fails over to another group.
	ErrLedgerBusy = errors.New("bank: ledger busy")
)
