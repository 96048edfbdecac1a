// Package e2e is the service the end-to-end tests run: generated client
// against generated server over the in-memory transport.
package e2e

import (
	"context"
	"errors"
	"time"
)

//go:generate ffgen

var (
	ErrInsufficient = errors.New("insufficient funds")
	ErrBusy         = errors.New("ledger busy")
)

// NotFoundError reports an unknown account; matched with errors.As.
type NotFoundError struct{ Account string }

func (e *NotFoundError) Error() string { return "no account " + e.Account }

// LimitError is an error type with a value receiver.
type LimitError struct {
	Limit int64
	Tags  []string
}

func (e LimitError) Error() string { return "over the limit" }

type Withdrawal struct {
	Account string
	Amount  int64
	Memo    *string
}

// Values travel as they are: a time keeps its location, an error the
// standard sentinels and the errno of its chain.
type Values struct {
	At  time.Time
	Err error
}

// Reader is embedded in Ledger: its methods and directives are Ledger's.
type Reader interface {
	// Balance returns the balance of an account.
	//ff:entity id
	//ff:hedge 30ms
	Balance(ctx context.Context, id string) (int64, error)
}

// Ledger is a replicated ledger.
//
//ff:service
type Ledger interface {
	Reader

	//ff:entity w.Account
	//ff:fail ErrInsufficient *NotFoundError LimitError
	//ff:failover ErrBusy
	Withdraw(ctx context.Context, w Withdrawal) (balance int64, err error)

	//ff:entity id
	//ff:scatter
	Deposit(ctx context.Context, id string, amount int64) (int64, error)

	//ff:entity id
	//ff:hold
	Close(ctx context.Context, id string) error

	//ff:entity id
	//ff:timeout attempt=300ms operation=500ms heartbeat=250ms failovers=1
	Slow(ctx context.Context, id string, d time.Duration) error

	//ff:entity id
	//ff:default failover
	Flaky(ctx context.Context, id string, notes ...string) (string, []string, error)

	//ff:entity id
	Echo(ctx context.Context, id string, v Values) (Values, error)
}
