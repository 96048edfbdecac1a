package testkit

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts returns n distinct loopback ports that were free, for TCP and
// UDP both (memberlist gossips over both), a moment ago.
func FreePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	var held []net.Listener // kept open until all are found, so none is found twice
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for try := 0; len(ports) < n; try++ {
		if try == 20*n {
			tb.Fatalf("found %d of %d free ports", len(ports), n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		u.Close()
		ports = append(ports, port)
	}
	return ports
}
