package bad_crosspkg

import (
	"context"

	"github.com/ffgen/ffgen/internal/golden/testdata/bad_crosspkg/base"
)

//ff:service
type Catalog interface {
	base.Reader

	//ff:entity id
	Put(ctx context.Context, id string) error
}
