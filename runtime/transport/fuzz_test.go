package transport

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
)

// FuzzConn feeds an arbitrary byte stream to a connection's read path, as
// a peer would send it: the Hello exchange, then frame after frame until
// the stream fails. It must never panic, end only with an error that says
// why, and never hold more buffer than the bytes that arrived justify or
// the node's budget allows; everything charged is given back at the end.
func FuzzConn(f *testing.F) {
	hello, err := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "peer", Group: "g", MaxFrame: 1 << 16}, 0)
	if err != nil {
		f.Fatal(err)
	}
	stream := append([]byte(nil), hello...)
	for _, fr := range frametest.Samples() {
		if fr.Type() == frame.TypeHello {
			continue
		}
		if stream, err = frame.Append(stream, fr, 0); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(stream)
	f.Add(hello)
	f.Add(append(hello[:len(hello):len(hello)], 0xff, 0xff, 0xff, 0xff))
	f.Add(append(hello[:len(hello):len(hello)], 0, 0, 0xff, 0, frame.Version, byte(frame.TypeResult), 1, 2, 3))
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
			err = readFrames(fr, func(f frame.Frame, size int) bool {
				if size > maxFrame+4 {
					t.Fatalf("a %d-byte frame passed a %d-byte limit", size, maxFrame)
				}
				return true
			})
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), frame.IsInvalid(err),
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
