//go:build !fast

package variants

import "context"

//ff:service
type Clock interface {
	//ff:entity zone
	Now(ctx context.Context, zone string) (int64, error)

	//ff:entity zone
	Sleep(ctx context.Context, zone string, n int64) error
}
