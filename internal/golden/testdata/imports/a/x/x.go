// Package x is one of two packages named x.
package x

type ID string
