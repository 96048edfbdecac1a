package bad_samemethod

import "context"

type Reader interface {
	//ff:entity key
	//ff:hedge 20ms
	Get(ctx context.Context, key string) (string, error)

	//ff:entity key
	Put(ctx context.Context, key, value string) error
}

type Cache interface {
	//ff:entity key
	//ff:hedge 50ms
	Get(ctx context.Context, key string) (string, error)

	Put(ctx context.Context, key, value string) error
}

//ff:service
type Store interface {
	Reader
	Cache
}
