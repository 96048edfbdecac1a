package transport

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic,
// and a frame it accepts must survive re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, fr := range sampleFrames() {
		b, err := AppendFrame(nil, fr, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[4:])
	}
	f.Add([]byte{})
	f.Add([]byte{Version, byte(TypeHeartbeat), 0xff, 0xff, 0xff, 0xff, 0x0f})

	f.Fuzz(func(t *testing.T, p []byte) {
		var d Decoder
		got, err := d.Decode(p)
		if err != nil {
			if !isProtocolError(err) {
				t.Fatalf("Decode error %v matches no protocol sentinel", err)
			}
			return
		}
		again, err := AppendFrame(nil, got, 1<<30)
		if err != nil {
			t.Fatalf("re-encoding %#v: %v", got, err)
		}
		// A fresh decoder: d's heartbeat would alias the one being compared.
		back, err := Decode(again[4:])
		if err != nil {
			t.Fatalf("decoding the re-encoded %#v: %v", got, err)
		}
		if diff := cmp.Diff(got, back, frameOpts); diff != "" {
			t.Fatalf("re-encode round trip mismatch (-first +second):\n%s", diff)
		}
	})
}

// FuzzConn feeds an arbitrary byte stream to a connection's read path, as
// a peer would send it: the Hello exchange, then frame after frame until
// the stream fails. It must never panic, end only with an error that says
// why, and never hold more buffer than the bytes that arrived justify or
// the node's budget allows; everything charged is given back at the end.
func FuzzConn(f *testing.F) {
	hello, err := AppendFrame(nil, &Hello{Version: Version, Node: "peer", Group: "g", MaxFrame: 1 << 16}, 0)
	if err != nil {
		f.Fatal(err)
	}
	stream := append([]byte(nil), hello...)
	for _, fr := range sampleFrames() {
		if fr.Type() == TypeHello {
			continue
		}
		if stream, err = AppendFrame(stream, fr, 0); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(stream)
	f.Add(hello)
	f.Add(append(hello[:len(hello):len(hello)], 0xff, 0xff, 0xff, 0xff))
	f.Add(append(hello[:len(hello):len(hello)], 0, 0, 0xff, 0, Version, byte(TypeResult), 1, 2, 3))
	f.Add(append(hello[:len(hello):len(hello)], hello...))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0xa5, 0x01})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))

	// The budget fits one frame of the largest size, gathered and then
	// copied whole.
	const maxFrame, budget = 64 << 10, 2 * (64<<10 + 4)
	f.Fuzz(func(t *testing.T, data []byte) {
		g := newGuard(0, budget, discard)
		src := &countingReader{r: bytes.NewReader(data)}
		fr := newFrameReader(src, maxFrame, g)
		src.check = func() {
			if held := fr.held(); held > baseReadBuffer+2*src.n+minChunk {
				t.Fatalf("after %d bytes the reader holds %d", src.n, held)
			}
			if n := g.buffered.Load(); n > budget || n != fr.charged {
				t.Fatalf("node counts %d buffered bytes, reader %d, budget %d", n, fr.charged, budget)
			}
		}
		_, err := readHello(fr)
		if err == nil {
			err = readFrames(fr, func(f Frame, size int) bool {
				if size > maxFrame+4 {
					t.Fatalf("a %d-byte frame passed a %d-byte limit", size, maxFrame)
				}
				return true
			})
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), isProtocolError(err),
			errors.Is(err, ErrOverloaded), errors.Is(err, ErrTLS):
		default:
			t.Fatalf("the stream ended with %v, which names no cause", err)
		}
		fr.release()
		if n := g.buffered.Load(); n != 0 {
			t.Fatalf("%d bytes still charged after the connection ended", n)
		}
	})
}

// countingReader counts the bytes it passed on and runs check before each
// Read.
type countingReader struct {
	r     io.Reader
	n     int
	check func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.check != nil {
		c.check()
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
