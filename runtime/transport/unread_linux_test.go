package transport

import (
	"io"
	"testing"
	"time"
)

// A socket tells the bytes that arrived and wait unread, and none once
// they are read.
func TestUnreadCountsWhatWaitsInTheSocket(t *testing.T) {
	a, b := tcpPair(t)
	rb := b.(*tcpConn)
	if n := rb.unread(); n != 0 {
		t.Fatalf("unread before anything was sent: %d, want 0", n)
	}
	msg := []byte("heartbeat!")
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rb.unread() < len(msg) {
		if time.Now().After(deadline) {
			t.Fatalf("unread %d after 10s, want %d", rb.unread(), len(msg))
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := io.ReadFull(b, make([]byte, len(msg))); err != nil {
		t.Fatal(err)
	}
	if n := rb.unread(); n != 0 {
		t.Errorf("unread after reading everything: %d, want 0", n)
	}
}
