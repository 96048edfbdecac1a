// Package imports uses two packages of the same name and types of the
// standard library, including error types from other packages.
package imports

import (
	"context"
	"io"
	"io/fs"
	"time"

	ax "github.com/ffgen/ffgen/internal/golden/testdata/imports/a/x"
	bx "github.com/ffgen/ffgen/internal/golden/testdata/imports/b/x"
)

// x is a local name that the imports named x must not take.
var x = 0

var _ = x

//ff:service
type Index interface {
	//ff:entity id
	//ff:fail io.EOF *fs.PathError
	//ff:failover io.ErrUnexpectedEOF
	Lookup(ctx context.Context, id ax.ID, key bx.Key, at time.Time) (map[ax.ID][]bx.Key, time.Duration, error)
}

// Go rejects imports used only by directives.
var (
	_ = io.EOF
	_ *fs.PathError
)
