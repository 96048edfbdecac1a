package pertype

import "context"

//go:generate ffgen -type Writes

//ff:service
type Writes interface {
	//ff:entity key
	Put(ctx context.Context, key, value string) error
}
