// Package pertype generates each of its two services with its own
// go:generate line, and uses the generated names of both: each run must
// accept the other's names and write what a run for every service writes.
package pertype

import "context"

//go:generate ffgen -type Reads

//ff:service
type Reads interface {
	//ff:entity key
	Get(ctx context.Context, key string) (string, error)
}
