//go:build !unix

package transport

import "net"

// rawWriter is the unix-only non-blocking socket write; elsewhere every
// write goes through a flusher goroutine.
type rawWriter struct{}

func newRawWriter(net.Conn) *rawWriter { return nil }

func (w *rawWriter) write([]byte) (int, error) { return 0, nil }
