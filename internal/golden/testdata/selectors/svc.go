// Package selectors uses names that generated types also need: an
// unexported method called like the client's field, parameters called like
// the codec methods of the message structs, and two services whose
// prefixes overlap (A's method BGet and AB's method Get).
package selectors

import "context"

//ff:service
type Conn interface {
	//ff:entity id
	client(ctx context.Context, id string) error

	//ff:entity appendFF
	Send(ctx context.Context, appendFF string, unmarshalFF []byte) (AppendFF int, UnmarshalFF string, err error)
}

//ff:service
type A interface {
	//ff:entity id
	BGet(ctx context.Context, id string) error
}

//ff:service
type AB interface {
	//ff:entity id
	Get(ctx context.Context, id string) error
}
