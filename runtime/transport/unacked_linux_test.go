package transport

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// userTimeout reads TCP_USER_TIMEOUT of c's socket.
func userTimeout(t *testing.T, c Conn) time.Duration {
	t.Helper()
	tc, ok := c.(*stream).nc.(*tcpConn)
	if !ok {
		t.Fatalf("the dialed stream's socket is %T, want *tcpConn", c.(*stream).nc)
	}
	var ms int
	var serr error
	if err := tc.rc.Control(func(fd uintptr) {
		ms, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return time.Duration(ms) * time.Millisecond
}

// A Dial asked to close what stays unacknowledged sets the socket's
// TCP_USER_TIMEOUT; other dials leave the system's default (0).
func TestDialClosesUnackedAfter(t *testing.T) {
	srv, cli := newTCP(t, "srv", nil), newTCP(t, "cli", nil)
	l := listen(t, srv, newRecorder())
	ctx := conncap.WithUnackedTimeout(context.Background(), 1500*time.Millisecond)
	c, err := cli.Dial(ctx, l.Addr(), newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if got := userTimeout(t, c); got != 1500*time.Millisecond {
		t.Errorf("TCP_USER_TIMEOUT %v, want 1.5s", got)
	}
	if got := userTimeout(t, dial(t, cli, l.Addr(), newRecorder())); got != 0 {
		t.Errorf("TCP_USER_TIMEOUT of a plain dial %v, want 0", got)
	}
}
