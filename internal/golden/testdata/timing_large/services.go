// Package timing_large is the timing fixture: 20 services of 10 methods each.
package timing_large

import (
	"context"
	"errors"
	"time"
)

var ErrBusy = errors.New("busy")

// NotFound is a declared error type.
type NotFound struct{ Key string }

func (e *NotFound) Error() string { return "not found: " + e.Key }

type Item struct {
	ID      string
	Count   int64
	Tags    []string
	Attrs   map[string]float64
	Created time.Time
	Parent  *Item
}

type Query struct {
	Tenant string
	Limit  int
	After  *string
}

// Service00 is one of the fixture's services.
//
//ff:service
type Service00 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service01 is one of the fixture's services.
//
//ff:service
type Service01 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service02 is one of the fixture's services.
//
//ff:service
type Service02 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service03 is one of the fixture's services.
//
//ff:service
type Service03 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service04 is one of the fixture's services.
//
//ff:service
type Service04 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service05 is one of the fixture's services.
//
//ff:service
type Service05 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service06 is one of the fixture's services.
//
//ff:service
type Service06 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service07 is one of the fixture's services.
//
//ff:service
type Service07 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service08 is one of the fixture's services.
//
//ff:service
type Service08 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service09 is one of the fixture's services.
//
//ff:service
type Service09 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service10 is one of the fixture's services.
//
//ff:service
type Service10 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service11 is one of the fixture's services.
//
//ff:service
type Service11 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service12 is one of the fixture's services.
//
//ff:service
type Service12 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service13 is one of the fixture's services.
//
//ff:service
type Service13 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service14 is one of the fixture's services.
//
//ff:service
type Service14 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service15 is one of the fixture's services.
//
//ff:service
type Service15 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service16 is one of the fixture's services.
//
//ff:service
type Service16 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service17 is one of the fixture's services.
//
//ff:service
type Service17 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service18 is one of the fixture's services.
//
//ff:service
type Service18 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}

// Service19 is one of the fixture's services.
//
//ff:service
type Service19 interface {
	// Method0 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method0(ctx context.Context, id string) (Item, error)

	// Method1 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method1(ctx context.Context, item Item) error

	// Method2 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method2(ctx context.Context, q Query) ([]Item, error)

	// Method3 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method3(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method4 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method4(ctx context.Context, id string, keys ...string) (map[string]Item, error)

	// Method5 is a fixture method.
	//ff:entity id
	//ff:fail *NotFound
	Method5(ctx context.Context, id string) (Item, error)

	// Method6 is a fixture method.
	//ff:entity item.ID
	//ff:failover ErrBusy
	Method6(ctx context.Context, item Item) error

	// Method7 is a fixture method.
	//ff:entity q.Tenant
	//ff:hedge 20ms
	Method7(ctx context.Context, q Query) ([]Item, error)

	// Method8 is a fixture method.
	//ff:entity id
	//ff:scatter
	Method8(ctx context.Context, id uint64, delta int64) (int64, error)

	// Method9 is a fixture method.
	//ff:entity id
	//ff:hold
	//ff:timeout attempt=1s operation=3s
	Method9(ctx context.Context, id string, keys ...string) (map[string]Item, error)
}
