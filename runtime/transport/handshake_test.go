package transport

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
	"github.com/ffgen/ffgen/runtime/codec"
)

// peerOfAnotherRelease listens on loopback as a node of another release
// would: it answers the first connection with hello, then reads until the
// dialer leaves or, with closeOnHello, closes once it has read the
// dialer's Hello (the reaction of a node that finds it malformed). It
// returns the address to dial.
func peerOfAnotherRelease(t *testing.T, hello []byte, closeOnHello bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(hello)
		if closeOnHello {
			c.Read(make([]byte, 64))
			return
		}
		io.Copy(io.Discard, c)
	}()
	return ln.Addr().String()
}

// A peer of another protocol version is named with what it speaks, on the
// side that reads its Hello, even when the Hello itself is laid out
// differently after the sender's name.
func TestHelloMismatchNamesBothVersions(t *testing.T) {
	// Protocol 2: another version byte, and a body this node cannot read.
	body := append([]byte{2}, codec.AppendString(nil, "next")...)
	body = append(body, 0xff, 0xff)
	hello := append([]byte{0, 0, 0, byte(len(body) + 2), 2, byte(frame.TypeHello)}, body...)
	addr := peerOfAnotherRelease(t, hello, false)
	_, err := newTCP(t, "client", nil).Dial(context.Background(), addr, newRecorder())
	if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrBadVersion) || errors.Is(err, ErrRefused) ||
		!strings.Contains(err.Error(), `peer "next" speaks protocol 2`) || !strings.Contains(err.Error(), fmt.Sprintf("this node 1 revision %d", frame.Revision)) {
		t.Errorf("Dial to a protocol-2 node: %v, want ErrProtocol naming both versions", err)
	}
}

// A node of the release before revisions reads this node's Hello as
// malformed (its revision and capabilities are trailing bytes to it) and
// closes the connection right after its own Hello: the dialer, which reads
// that Hello, names both revisions when the connection ends.
func TestOlderRevisionClosingIsNamed(t *testing.T) {
	old, _ := hex.DecodeString(frametest.PreviousRelease[0].Hex)
	addr := peerOfAnotherRelease(t, old, true)
	rec := newRecorder()
	conn, err := newTCP(t, "client", nil).Dial(context.Background(), addr, rec)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	cl := rec.nextClose(t)
	if !strings.Contains(cl.err.Error(), fmt.Sprintf(`peer "a1" speaks protocol 1 revision 0, this node 1 revision %d`, frame.Revision)) {
		t.Errorf("close: %v, want both revisions named", cl.err)
	}
}

// A peer of another protocol version is a protocol mismatch, not a
// refused connection.
func TestTCPVersionMismatchIsNamed(t *testing.T) {
	old, _ := frame.Append(nil, &frame.Hello{Version: 0, Node: "old", Group: "g"}, 0)
	addr := peerOfAnotherRelease(t, old, false)
	_, err := newTCP(t, "client", nil).Dial(context.Background(), addr, newRecorder())
	if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrBadVersion) || errors.Is(err, ErrRefused) ||
		!strings.Contains(err.Error(), `peer "old" speaks protocol 0 revision 0, this node 1`) {
		t.Errorf("Dial to a version-0 node: %v, want ErrProtocol and ErrBadVersion naming the versions", err)
	}
}
