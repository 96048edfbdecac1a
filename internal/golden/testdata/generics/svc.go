// Package generics carries instantiated generic types and aliases.
package generics

import "context"

type Page[T any] struct {
	Items []T
	Next  *Page[T]
}

type Pair[K comparable, V any] struct {
	Key K
	Val V
}

type Item struct{ Name string }

// Items is an alias of a slice type.
type Items = []Item

// PageOfItem is an alias of an instantiated type.
type PageOfItem = Page[Item]

// Set is a generic alias.
type Set[T comparable] = map[T]bool

//ff:service
type Catalog interface {
	//ff:entity cursor.Key
	List(ctx context.Context, cursor Pair[string, int]) (Page[Item], error)

	//ff:entity id
	Aliases(ctx context.Context, id string, items Items, page PageOfItem, tags Set[string]) (Page[string], error)
}
