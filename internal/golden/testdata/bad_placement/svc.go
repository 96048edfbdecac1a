package bad_placement

import "context"

// Plain is not a service, so its directives are misplaced.
type Plain interface {
	//ff:entity id
	Get(ctx context.Context, id string) error
}

//ff:service
type NotAnInterface struct{}

//ff:entity id
func Helper() {}

//ff:service
type Generic[T any] interface {
	//ff:entity id
	Get(ctx context.Context, id string) (T, error)
}

//ff:service
type HTTPServer interface {
	//ff:entity id
	Get(ctx context.Context, id string) error
}

//ff:service
type HttpServer interface {
	//ff:entity id
	Get(ctx context.Context, id string) error
}

var x = 1 //ff:hold
