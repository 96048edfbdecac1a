// Package variants declares each service twice, for two platforms and for
// two build tags: each variant generates a file of its own that carries
// its source's constraint.
package variants

import "context"

// Value is what both variants of Store hold.
type Value struct{ N int64 }

var _ context.Context
