// Package minimal is the smallest service: one method, no options.
package minimal

import "context"

//ff:service
type Echo interface {
	//ff:entity id
	Echo(ctx context.Context, id string) error
}
