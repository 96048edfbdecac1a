// Package generic_errors declares instantiated generic error types in
// //ff:fail and //ff:failover: each instance is its own rule with its own
// codec.
package generic_errors

import "context"

// NotFound is a generic error type; its instances are declared errors.
type NotFound[K comparable] struct{ Key K }

func (e *NotFound[K]) Error() string { return "not found" }

// Pair is a value error type with two type parameters.
type Pair[A, B any] struct {
	First  A
	Second B
}

func (p Pair[A, B]) Error() string { return "pair" }

//ff:service
type Index interface {
	//ff:entity name
	//ff:fail *NotFound[string] Pair[string, []int]
	//ff:failover *NotFound[int64]
	Lookup(ctx context.Context, name string) (int64, error)
}
