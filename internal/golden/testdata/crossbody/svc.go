// Package crossbody embeds an interface whose directive names io.EOF,
// which this package does not import.
package crossbody

import (
	"context"

	"github.com/ffgen/ffgen/internal/golden/testdata/crossbody/base"
)

//ff:service
type Store interface {
	base.Blobs

	//ff:entity key
	Write(ctx context.Context, key string, data []byte) error
}
