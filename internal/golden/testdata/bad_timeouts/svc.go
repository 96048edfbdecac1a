package bad_timeouts

import "context"

// Every method sets one key that conflicts with the defaults of the keys
// it leaves unset, or with the interface's.
//
//ff:service
//ff:timeout attempt=2s
type Store interface {
	//ff:entity id
	//ff:timeout operation=1ms
	Short(ctx context.Context, id string) error

	//ff:entity id
	//ff:timeout heartbeat=3s
	Deaf(ctx context.Context, id string) error

	//ff:entity id
	//ff:timeout attempt=20s
	Long(ctx context.Context, id string) error

	//ff:entity id
	//ff:timeout attempt=5s operation=1s
	Twice(ctx context.Context, id string) error

	//ff:entity id
	//ff:timeout operation=2s heartbeat=1s
	Fine(ctx context.Context, id string) error
}
