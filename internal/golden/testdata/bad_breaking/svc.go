// Package bad_breaking is the second version of a service whose first
// version's schema orders_ff.go records: every change below would break a
// cluster running both versions.
package bad_breaking

import (
	"context"
	"errors"
)

var (
	ErrFull   = errors.New("full")
	ErrClosed = errors.New("closed")
)

type Order struct {
	ID       string
	Customer string
	// Qty was an int32: a number.
	Qty string
	// Extra takes Note's number, which was a string.
	Extra int64 `ff:"3"`
	// Count was added: fine.
	Count int64
}

//ff:service
type Orders interface {
	// The entity was o.ID; ErrClosed was declared.
	//ff:entity o.Customer
	//ff:fail ErrFull
	Place(ctx context.Context, o Order) (int64, error)

	// Was a replicated write.
	//ff:entity id
	Cancel(ctx context.Context, id string) error

	// Was (ctx, id string).
	//ff:entity id
	Find(ctx context.Context, id int64) (Order, error)

	// Gone was removed.
}
