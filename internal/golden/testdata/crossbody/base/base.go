// Package base declares an interface that a service of another package
// embeds. It uses io only in a function body, and nothing the service's
// package imports imports io, so its export data does not
// list io among its imports: the names its directives use must still
// resolve in this file's scope.
package base

import (
	"context"
	"io"
)

// AtEnd reports whether err says the end was reached; io is not in its
// signature, so the export data of base does not list it.
func AtEnd(err error) bool { return err == io.EOF }

// Blobs is embedded by crossbody.Store.
type Blobs interface {
	//ff:entity key
	//ff:fail io.EOF
	Read(ctx context.Context, key string) ([]byte, error)
}
