//go:build !linux

package main

import "errors"

var errNoPin = errors.New("-pin needs Linux")

func pinSelf(int) error { return errNoPin }

func canPin() error { return errNoPin }
