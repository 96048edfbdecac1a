//go:build !linux

package transport

// unread cannot tell here: -1.
func (c *tcpConn) unread() int { return -1 }
