// Package x is the other package named x.
package x

type Key struct{ Shard int }
