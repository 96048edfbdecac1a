// Package base declares an interface that services of other packages
// embed; it is not a service itself.
package base

import (
	"context"
	"errors"
	"io"
)

var ErrGone = errors.New("gone")

// An import used only by a directive must still be used by the file.
var _ = io.EOF

type Value struct{ N int }

// Reader is embedded by crosspkg.Catalog.
type Reader interface {
	// Get returns the value of key.
	//ff:entity key
	//ff:fail ErrGone io.EOF
	//ff:timeout failovers=0
	Get(ctx context.Context, key string) (Value, error)
}
