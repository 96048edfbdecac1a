// Package shapes covers method shapes, codec kinds and entity kinds.
package shapes

import (
	"context"
	"time"
)

type Level int8

type Blob []byte

type Node struct {
	Value int
	Next  *Node
}

type Inner struct {
	Shard *uint32
}

type Outer struct {
	In   **Inner
	Name string
}

type Embedded struct {
	Tenant string
}

type Request struct {
	Embedded
	Raw    Blob
	Ratio  float32
	Z      complex128
	When   time.Time
	Cause  error
	Grid   [3][2]int
	Counts map[Level][]uint
	List   *Node
	Flag   bool
	_      int
}

// NotFound is an error type with a value receiver.
type NotFound struct{ Key string }

func (e NotFound) Error() string { return "not found: " + e.Key }

//ff:service
//ff:default failover
type Shapes interface {
	// Log appends lines.
	//ff:entity id
	Log(ctx context.Context, id uint64, lines ...string) error

	//ff:entity o.In.Shard o.Name
	Deep(ctx context.Context, o *Outer) (n int, err error)

	//ff:entity req.Tenant
	//ff:fail NotFound
	Big(ctx context.Context, req Request) (*Request, Level, error)

	//ff:entity level
	//ff:default fail
	Only(ctx context.Context, level Level) error
}
