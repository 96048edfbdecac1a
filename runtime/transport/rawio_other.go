//go:build !unix

package transport

import "net"

// wrapTCP returns nc: the raw socket calls are unix-only.
func wrapTCP(nc net.Conn) net.Conn { return nc }

// rawWriter is the unix-only non-blocking socket write; elsewhere every
// write goes through a flusher goroutine.
type rawWriter struct{}

func newRawWriter(net.Conn) *rawWriter { return nil }

func (w *rawWriter) write([]byte) (int, error) { return 0, nil }
