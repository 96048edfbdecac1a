// Package samemethod embeds two interfaces that both declare Get, with the
// same directives: Go allows it, and the service has one Get.
package samemethod

import "context"

type Reader interface {
	// Get returns the value of key.
	//ff:entity key
	//ff:hedge 20ms
	Get(ctx context.Context, key string) (string, error)
}

type Cache interface {
	//ff:entity key
	//ff:hedge 20ms
	Get(ctx context.Context, key string) (string, error)

	//ff:entity key
	Evict(ctx context.Context, key string) error
}

//ff:service
type Store interface {
	Reader
	Cache
}
