// Package base is embedded from another package; the mistakes in its
// methods and directives are reported in its own file, at the same
// positions whether or not the patterns name it.
package base

import "context"

type Reader interface {
	//ff:entity name
	//ff:fail ErrNope
	Get(ctx context.Context, key string) (string, error)

	Watch(ctx context.Context, key string, c chan int) error
}
