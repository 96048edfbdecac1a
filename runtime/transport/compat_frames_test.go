package transport

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"
)

// previousRelease holds one frame of each type as the release before
// protocol revisions wrote them (its Hello has no revision and no
// capabilities): a node of today must keep reading them, since a rolling
// upgrade mixes the two.
var previousRelease = []struct {
	hex  string
	want Frame
}{
	{"0000000c010101026131016180808002", &Hello{Version: 1, Node: "a1", Group: "a", MaxFrame: 4 << 20}},
	{"00000050010207010203000000000000000000000000000180d0acf30e80c2d72f0d62616e6b2e4163636f756e74730857697468647261770106616363742d31280102623101620100050a0361626301016b0176",
		&Attempt{Call: 7, OpID: [16]byte{1, 2, 3}, Number: 1, Timeout: 2 * time.Second, Heartbeat: 50 * time.Millisecond,
			Service: "bank.Accounts", Method: "Withdraw", Entities: []string{"acct-1"}, Flags: FlagAck | FlagAllBeat,
			History: []Prior{{Node: "b1", Group: "b", Reason: 1}}, Payload: []byte{10, 3, 'a', 'b', 'c'}, Metadata: []string{"k", "v"}}},
	{"0000000a010301070468616c6601", &Heartbeat{Items: []HeartbeatItem{{Call: 7, Progress: []byte("half")}}, All: true}},
	{"0000002f0104070114457272496e73756666696369656e7446756e647312696e73756666696369656e742066756e6473020801",
		&Result{Call: 7, Status: StatusFail, Code: "ErrInsufficientFunds", Message: "insufficient funds", Payload: []byte{8, 1}}},
	{"00000003010507", &Cancel{Call: 7}},
	{"000000150106070261320e3132372e302e302e313a37303030", &Redirect{Call: 7, Node: "a2", Addr: "127.0.0.1:7000"}},
	{"000000150107100d62616e6b2e4163636f756e747303010203", &Replica{Kind: 16, Service: "bank.Accounts", Body: []byte{1, 2, 3}}},
	{"00000003010807", &Ack{Call: 7}},
}

func TestFramesOfThePreviousReleaseDecode(t *testing.T) {
	for _, c := range previousRelease {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Decode(b[4:])
		if err != nil {
			t.Errorf("%s: %v", c.want.Type(), err)
			continue
		}
		if !reflect.DeepEqual(f, c.want) {
			t.Errorf("%s decodes as %+v, want %+v", c.want.Type(), f, c.want)
		}
	}
}

// A Hello of a later revision, with fields this one does not know, is read:
// the fields it knows, and the rest skipped.
func TestHelloOfALaterRevisionDecodes(t *testing.T) {
	h := &Hello{Version: Version, Node: "n2", Group: "b", MaxFrame: 1 << 20, Revision: Revision + 1, Caps: Caps | 1<<9}
	b, err := AppendFrame(nil, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	b = codec.AppendString(b, "a field of the next revision")
	b[3] += byte(len(b) - 4 - int(b[3])) // the length prefix covers the new field
	f, err := Decode(b[4:])
	if err != nil || !reflect.DeepEqual(f, h) {
		t.Fatalf("Decode = %+v, %v; want %+v", f, err, h)
	}
}

// A peer of another protocol version is named with what it speaks, on the
// side that reads its Hello, even when the Hello itself is laid out
// differently after the sender's name.
func TestHelloMismatchNamesBothVersions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Protocol 2: another version byte, and a body this node cannot read.
		body := append([]byte{2}, codec.AppendString(nil, "next")...)
		body = append(body, 0xff, 0xff)
		frame := append([]byte{0, 0, 0, byte(len(body) + 2), 2, byte(TypeHello)}, body...)
		c.Write(frame)
		io.Copy(io.Discard, c)
	}()
	_, err = newTCP(t, "client", nil).Dial(context.Background(), ln.Addr().String(), newRecorder())
	if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrBadVersion) || errors.Is(err, ErrRefused) ||
		!strings.Contains(err.Error(), `peer "next" speaks protocol 2`) || !strings.Contains(err.Error(), "this node 1 revision 1") {
		t.Errorf("Dial to a protocol-2 node: %v, want ErrProtocol naming both versions", err)
	}
}

// A node of the release before revisions reads this node's Hello as
// malformed (its revision and capabilities are trailing bytes to it) and
// closes the connection right after its own Hello: the dialer, which reads
// that Hello, names both revisions when the connection ends.
func TestOlderRevisionClosingIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		old, _ := hex.DecodeString(previousRelease[0].hex)
		c.Write(old)
		// It reads the Hello, finds trailing bytes, and closes.
		buf := make([]byte, 64)
		c.Read(buf)
		c.Close()
	}()
	rec := newRecorder()
	conn, err := newTCP(t, "client", nil).Dial(context.Background(), ln.Addr().String(), rec)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	cl := rec.nextClose(t)
	if !strings.Contains(cl.err.Error(), `peer "a1" speaks protocol 1 revision 0, this node 1 revision 1`) {
		t.Errorf("close: %v, want both revisions named", cl.err)
	}
}
