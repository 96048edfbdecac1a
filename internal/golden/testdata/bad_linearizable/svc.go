package bad_linearizable

import "context"

// Ledger is replicated: Deposit is scattered.
//
//ff:service
type Ledger interface {
	//ff:entity id
	//ff:scatter
	Deposit(ctx context.Context, id string, amount int64) (int64, error)

	// A scattered write is not a read.
	//ff:entity id
	//ff:scatter
	//ff:linearizable
	Withdraw(ctx context.Context, id string, amount int64) (int64, error)

	// The directive takes no arguments.
	//ff:entity id
	//ff:linearizable strict
	Balance(ctx context.Context, id string) (int64, error)

	// Accepted: every attempt, the hedged one too, is linearizable.
	//ff:entity id
	//ff:linearizable
	//ff:hedge 20ms
	History(ctx context.Context, id string) ([]int64, error)
}

// Cache has no scatter method, so it is not replicated.
//
//ff:service
type Cache interface {
	//ff:entity key
	Put(ctx context.Context, key, value string) error

	//ff:entity key
	//ff:linearizable
	Get(ctx context.Context, key string) (string, error)
}
