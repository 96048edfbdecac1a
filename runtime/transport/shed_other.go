//go:build !linux

package transport

import "net"

// shedder is the Linux-only way of shedding connections without making a
// net.Conn of them; elsewhere they are accepted and closed.
type shedder struct{}

func newShedder(net.Listener, func(fd int) bool) *shedder { return nil }

func (s *shedder) drain(func() bool, func(string)) bool { return false }

// tellFDInPassing is Linux-only, as the shedder is.
func tellFDInPassing(int, []byte) {}

// tellConnInPassing is Linux-only too: elsewhere tellInPassing writes
// with a deadline.
func tellConnInPassing(net.Conn, []byte) bool { return false }
