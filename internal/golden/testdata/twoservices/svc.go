// Package twoservices declares two services that reach the same types;
// each generated file gets its own helpers.
package twoservices

import "context"

type Doc struct {
	Key  string
	Body []byte
}

//ff:service
type Reads interface {
	//ff:entity key
	Get(ctx context.Context, key string) (Doc, error)
}

//ff:service
type Writes interface {
	//ff:entity d.Key
	Put(ctx context.Context, d Doc) error
}
