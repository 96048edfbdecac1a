// Package orders, at evolve_v1, is the first version of a service whose
// second version is evolve_v2 (the same package name, so the same service
// on the wire): the tests run each version's clients against the other's
// servers.
package orders

import (
	"context"
	"errors"
)

var ErrNoStock = errors.New("orders: no stock")

type Order struct {
	ID    string
	Qty   int32
	Note  string
	Price float32
	Data  string
}

type Receipt struct {
	ID    string
	Total int64
}

//ff:service
type Orders interface {
	//ff:entity o.ID
	//ff:fail ErrNoStock
	Place(ctx context.Context, o Order) (Receipt, error)

	//ff:entity id
	Get(ctx context.Context, id string) (Order, error)
}
