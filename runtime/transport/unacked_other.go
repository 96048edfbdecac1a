//go:build !linux

package transport

import (
	"net"
	"time"
)

// closeUnackedAfter does nothing here: the connection closes when TCP
// gives up on its own.
func closeUnackedAfter(*net.TCPConn, time.Duration) error { return nil }
