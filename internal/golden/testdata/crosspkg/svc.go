// Package crosspkg embeds an interface declared in another package: its
// directives, and the names they use, are read from that package's source
// whether or not the patterns name it.
package crosspkg

import (
	"context"

	"github.com/ffgen/ffgen/internal/golden/testdata/crosspkg/base"
)

// Catalog reads through base.Reader and writes itself.
//
//ff:service
type Catalog interface {
	base.Reader

	//ff:entity id
	Put(ctx context.Context, id string, v base.Value) error
}
