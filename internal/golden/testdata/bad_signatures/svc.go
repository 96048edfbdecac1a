package bad_signatures

import "context"

//ff:service
type Shapes interface {
	//ff:entity id
	NoContext(id string) error

	//ff:entity id
	NoError(ctx context.Context, id string) string

	//ff:entity id
	Nothing()

	//ff:entity id
	TwoContexts(ctx context.Context, id string, other context.Context) error

	//ff:entity ids
	Variadic(ctx context.Context, ids ...string) error
}

//ff:service
type Empty interface{}
