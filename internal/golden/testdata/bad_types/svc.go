package bad_types

import (
	"context"
	"io"
	"sync"
)

type Holder struct {
	Mu sync.Mutex
}

type Deep struct {
	Callbacks map[string]func()
}

//ff:service
type Codecs interface {
	//ff:entity id
	Chan(ctx context.Context, id string, c chan int) error

	//ff:entity id
	Func(ctx context.Context, id string) (func(), error)

	//ff:entity id
	Iface(ctx context.Context, id string, r io.Reader) error

	//ff:entity id
	Any(ctx context.Context, id string, v any) error

	//ff:entity id
	Unexported(ctx context.Context, id string, h Holder) error

	//ff:entity id
	Nested(ctx context.Context, id string, d *Deep) error
}
