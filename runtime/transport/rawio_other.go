//go:build !unix

package transport

import "net"

// wrapTCP returns nc: the raw socket calls are unix-only.
func wrapTCP(nc net.Conn) net.Conn { return nc }

// tcpConn is the unix-only raw socket; elsewhere every write goes through
// a flusher goroutine.
type tcpConn struct{}

func rawTCP(net.Conn) *tcpConn { return nil }

func (c *tcpConn) writeNow([]byte) (int, error) { return 0, nil }
