package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/ffgen/ffgen/internal/frame/frametest"
	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
)

// A length prefix announcing 2 GiB must fail before the reader allocates
// or waits for the body, which never comes.
func TestFrameReaderLengthBomb(t *testing.T) {
	bomb := binary.BigEndian.AppendUint32(nil, 2<<30)
	src := bytes.NewReader(bomb)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(bomb)
		fr := frameReader{rd: src, max: DefaultMaxFrameSize, buf: make([]byte, initialReadBuffer)}
		if _, err := fr.next(); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("next() error = %v, want ErrFrameTooLarge", err)
		}
	})
	// The initial buffer and formatting the error are all that allocate.
	if allocs > 8 {
		t.Errorf("rejecting a 2 GiB prefix allocated %v times per run", allocs)
	}
}

// A frame within the limit takes memory only as its bytes arrive: the
// announced length alone allocates nothing, and the reader never holds
// more than twice what came. The node's budget is charged for the whole
// frame from the start, and the chunks stay within that charge.
func TestFrameReaderGrowsWithArrivals(t *testing.T) {
	g := newGuard(0, 64<<20, slog.New(slog.DiscardHandler))
	hdr := binary.BigEndian.AppendUint32(nil, 4<<20)
	src := &trickle{data: append(hdr, frame.Version, byte(frame.TypeResult)), limit: 1 << 20}
	fr := newFrameReader(src, DefaultMaxFrameSize, g)
	src.check = func(sent int) {
		if held := fr.held(); held > baseReadBuffer+2*sent+minChunk {
			t.Fatalf("after %d bytes the reader holds %d bytes", sent, held)
		}
	}
	if _, err := fr.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("next() = %v, want io.ErrUnexpectedEOF", err)
	}
	if charged := g.buffered.Load(); charged != 2*(4+4<<20) || charged != fr.charged {
		t.Errorf("after 1 MiB of a 4 MiB frame: %d bytes charged to the node, reader says %d; want twice the frame, %d", charged, fr.charged, 2*(4+4<<20))
	}
	fr.release()
	if n := g.buffered.Load(); n != 0 {
		t.Errorf("after release the node still counts %d buffered bytes", n)
	}
}

// trickle serves data, then zeros up to limit bytes, at most 64 KiB per
// Read, then io.EOF; check sees the count before every Read.
type trickle struct {
	data  []byte
	sent  int
	limit int
	check func(sent int)
}

func (r *trickle) Read(p []byte) (int, error) {
	if r.check != nil {
		r.check(r.sent)
	}
	if r.sent >= r.limit {
		return 0, io.EOF
	}
	n := min(len(p), 64<<10, r.limit-r.sent)
	if r.sent < len(r.data) {
		n = copy(p[:n], r.data[r.sent:])
	} else {
		clear(p[:n])
	}
	r.sent += n
	return n, nil
}

// A node whose read budget cannot hold a frame ends its connection at the
// frame's length, with ErrOverloaded, before reading any more of it, and
// charges nothing for it.
func TestFrameReaderBudget(t *testing.T) {
	g := newGuard(0, 100<<10, slog.New(slog.DiscardHandler))
	fr := refusedUnread(t, g, 200<<10)
	if n := g.buffered.Load(); n != 0 || fr.charged != 0 {
		t.Errorf("node counts %d bytes, reader %d; want 0", n, fr.charged)
	}
}

// refusedUnread reads a frame with a payload of size bytes through a new
// reader charged to g, checks that the budget refuses it with
// ErrOverloaded having read no more than the reader's first read, and
// returns the reader.
func refusedUnread(t *testing.T, g *guard, size int) *frameReader {
	t.Helper()
	stream, err := frame.Append(nil, &frame.Result{Call: 1, Payload: make([]byte, size)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.NewReader(stream)
	fr := newFrameReader(src, DefaultMaxFrameSize, g)
	if _, err := fr.next(); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("a frame of %d bytes: next() = %v, want ErrOverloaded", size, err)
	}
	if read := len(stream) - src.Len(); read > initialReadBuffer {
		t.Errorf("read %d bytes of a frame the budget cannot hold; want at most the first read, %d", read, initialReadBuffer)
	}
	return fr
}

// Frames in progress hold the budget by their announced lengths: once
// they fill it, another connection's large frame is refused at its length
// and reads nothing more, and what a frame held is free for the next one
// when it completes.
func TestFrameReaderBudgetHeldByAnnouncedFrames(t *testing.T) {
	g := newGuard(0, 5<<20, slog.New(slog.DiscardHandler))
	stalled := &trickle{data: binary.BigEndian.AppendUint32(nil, 2<<20), limit: 64 << 10}
	a := newFrameReader(stalled, DefaultMaxFrameSize, g)
	if _, err := a.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("stalled frame: next() = %v, want io.ErrUnexpectedEOF", err)
	}
	if n := g.buffered.Load(); n != 2*(4+2<<20) {
		t.Fatalf("a stalled 2 MiB frame, 64 KiB of it here, charges %d bytes; want %d", n, 2*(4+2<<20))
	}

	refusedUnread(t, g, 1<<20)

	a.release()
	stream, err := frame.Append(nil, &frame.Result{Call: 1, Payload: make([]byte, 1<<20)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := newFrameReader(bytes.NewReader(stream), DefaultMaxFrameSize, g)
	p, err := c.next()
	if err != nil {
		t.Fatalf("the same frame after the stalled one ended: %v", err)
	}
	if f, err := frame.Decode(p); err != nil || len(f.(*frame.Result).Payload) != 1<<20 {
		t.Fatalf("decoded %v, %v", f, err)
	}
	if n, want := g.buffered.Load(), int64(len(stream)); n != want {
		t.Errorf("while the handler holds the frame the node counts %d bytes; want its %d", n, want)
	}
	c.release()
	if n := g.buffered.Load(); n != 0 {
		t.Errorf("after release the node still counts %d buffered bytes", n)
	}
}

// After a large frame the reader returns to its base buffer and gives the
// charged bytes back before the next frame.
func TestFrameReaderShrinksAfterLargeFrame(t *testing.T) {
	g := newGuard(0, 0, slog.New(slog.DiscardHandler))
	var stream []byte
	for _, f := range []frame.Frame{&frame.Result{Call: 1, Payload: make([]byte, 1<<20)}, &frame.Cancel{Call: 2}} {
		var err error
		if stream, err = frame.Append(stream, f, 0); err != nil {
			t.Fatal(err)
		}
	}
	fr := newFrameReader(bytes.NewReader(stream), DefaultMaxFrameSize, g)
	if _, err := fr.next(); err != nil {
		t.Fatal(err)
	}
	if g.buffered.Load() == 0 {
		t.Fatal("a 1 MiB frame was read without charging the node")
	}
	p, err := fr.next()
	if err != nil {
		t.Fatal(err)
	}
	if f, err := frame.Decode(p); err != nil || f.(*frame.Cancel).Call != 2 {
		t.Fatalf("second frame: %v, %v", f, err)
	}
	if len(fr.buf) > baseReadBuffer || g.buffered.Load() != 0 {
		t.Errorf("after the large frame: buffer %d bytes, %d charged; want <= %d and 0", len(fr.buf), g.buffered.Load(), baseReadBuffer)
	}
}

func TestFrameReaderStream(t *testing.T) {
	big := &frame.Result{Call: 1, Payload: bytes.Repeat([]byte{7}, baseReadBuffer+10)}
	frames := []frame.Frame{&frame.Cancel{Call: 1}, big, &frame.Heartbeat{Items: []frame.HeartbeatItem{{Call: 2}}}, &frame.Cancel{Call: 3}}
	var stream []byte
	for _, f := range frames {
		var err error
		if stream, err = frame.Append(stream, f, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Reads of 1 and 4096 bytes in turn split frames and headers anywhere.
	fr := newFrameReader(&shortReader{r: bytes.NewReader(stream)}, DefaultMaxFrameSize, nil)
	var d frame.Decoder
	for i, want := range frames {
		p, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got, err := d.Decode(p)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if diff := cmp.Diff(want, got, frametest.Opts); diff != "" {
			t.Errorf("frame %d mismatch (-want +got):\n%s", i, diff)
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}

	// A stream cut inside a frame is an unexpected EOF, not a clean end.
	for _, cut := range []int{2, 5, len(stream) - 1} {
		fr := newFrameReader(bytes.NewReader(stream[:cut]), DefaultMaxFrameSize, nil)
		var err error
		for err == nil {
			_, err = fr.next()
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("stream cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

type shortReader struct {
	r    io.Reader
	long bool
}

func (s *shortReader) Read(p []byte) (int, error) {
	n := 1
	if s.long {
		n = 4096
	}
	s.long = !s.long
	return s.r.Read(p[:min(n, len(p))])
}

// held is what the reader's buffers take.
func (r *frameReader) held() int {
	n := len(r.buf) + cap(r.big)
	for _, c := range r.chunks {
		n += cap(c)
	}
	return n
}
