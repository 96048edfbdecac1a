// Package embedded builds a service from embedded interfaces; their methods
// and directives belong to the service.
package embedded

import (
	"context"
	"errors"
)

var ErrMissing = errors.New("missing")

// Reader reads; it is not a service itself.
type Reader interface {
	// Get returns the value of key.
	//ff:entity key
	//ff:fail ErrMissing
	Get(ctx context.Context, key string) (string, error)
}

// Writer writes.
type Writer interface {
	//ff:entity key
	//ff:hold
	Put(ctx context.Context, key, value string) error
}

// Store reads and writes.
//
//ff:service
//ff:timeout attempt=1s
type Store interface {
	Reader
	Writer

	//ff:entity key
	//ff:timeout failovers=0
	Delete(ctx context.Context, key string) error
}
