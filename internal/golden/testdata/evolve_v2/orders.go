// Package orders, at evolve_v2, is the second version of evolve_v1's
// service: a field added in the middle and one at the end, one removed,
// int32 widened to int64, float32 to float64, string changed to []byte, a
// result field, a method and a declared error added. Its field numbers come
// from the schema evolve_v1 recorded.
package orders

import (
	"context"
	"errors"
)

var (
	ErrNoStock     = errors.New("orders: no stock")
	ErrBackordered = errors.New("orders: backordered")
)

type Order struct {
	ID    string
	Tags  []string
	Qty   int64
	Price float64
	Data  []byte
	Rush  bool
}

type Receipt struct {
	ID    string
	Total int64
	Lines map[string]int64
}

//ff:service
type Orders interface {
	//ff:entity o.ID
	//ff:fail ErrNoStock ErrBackordered
	Place(ctx context.Context, o Order) (Receipt, error)

	//ff:entity id
	Get(ctx context.Context, id string) (Order, error)

	//ff:entity id
	Count(ctx context.Context, id string) (int64, error)
}
