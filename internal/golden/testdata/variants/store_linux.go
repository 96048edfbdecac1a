package variants

import "context"

//ff:service
type Store interface {
	//ff:entity key
	Get(ctx context.Context, key string) (Value, error)
}
