// Package collisions uses, as its own names, every name the generated code
// would like for itself.
package collisions

import "context"

// Client is the user's own type, not the runtime's.
type Client struct{ Name string }

type runtime struct{}

var (
	codec   = 1
	errors  = "not the package"
	strconv = runtime{}
)

func ctx() {}

func collisionsGetDesc() {}

func svcGetArgs() {}

func svcAppendClient() {}

var _, _, _ = codec, errors, strconv

//ff:service
type Svc interface {
	//ff:entity runtime
	Get(ctx context.Context, runtime string, c Client, args []string, err string) (Client, error)

	//ff:entity id
	Unnamed(_ context.Context, id int64, _ bool, _ string) error

	//ff:entity b
	Locals(ctx context.Context, b uint16, m map[string]int, r []byte, v *Client, a [2]Client, impl string, dst string) (reply int, zero string, err error)

	//ff:entity target
	//ff:fail *Failure
	Failing(ctx context.Context, target string, detail string) error
}

type Failure struct{ target, r, detail string }

func (f Failure) Error() string { return f.target + f.r + f.detail }
