package bad_directives

import (
	"context"
	"errors"
	"io"
)

var ErrGone = errors.New("gone")

var notAnError = 42

type Key struct{ Shard int }

type Req struct {
	ID    string
	Score float64
	Key   *Key
}

// PtrOnly implements error on its pointer only.
type PtrOnly struct{}

func (*PtrOnly) Error() string { return "ptr" }

//ff:service
//ff:default maybe
//ff:hold
type Store interface {
	//ff:entity id
	//ff:frobnicate
	Unknown(ctx context.Context, id string) error

	//ff:entity id
	//ff:hedge soon
	//ff:timeout attempt=fast operation=1s retries=3 failovers=-1 heartbeat
	Malformed(ctx context.Context, id string) error

	//ff:entity id
	//ff:hold
	//ff:scatter
	//ff:hedge 10ms
	Conflicts(ctx context.Context, id string) error

	NoEntity(ctx context.Context, id string) error

	//ff:entity req.Name key req.Score req.Key.Shard
	Paths(ctx context.Context, req Req) error

	//ff:entity id
	//ff:fail ErrGone ErrMissing notAnError io.EOF io.Nope PtrOnly *Req error ErrGone
	//ff:failover
	Errors(ctx context.Context, id string) error

	//ff:entity id
	//ff:timeout attempt=5s operation=1s
	//ff:entity id
	Twice(ctx context.Context, id string) error
}

var _ = io.EOF
