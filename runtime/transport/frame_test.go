package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// sampleFrames returns one populated frame of every type, plus edge cases.
func sampleFrames() map[string]Frame {
	return map[string]Frame{
		"hello": &Hello{Version: Version, Node: "node-a", Group: "zone-1"},
		"attempt": &Attempt{
			Call:      42,
			OpID:      [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			Number:    1,
			Timeout:   5 * time.Second,
			Heartbeat: 90 * time.Millisecond,
			Service:   "Accounts",
			Method:    "Withdraw",
			Entities:  []string{"acct-1", "acct-2"},
			Flags:     FlagHold | FlagHedge,
			History:   []Prior{{Node: "node-b", Group: "zone-2", Reason: 3}},
			Progress:  []byte("half"),
			Payload:   []byte{0, 1, 2, 255},
		},
		"attempt-minimal": &Attempt{Service: "S", Method: "M", Timeout: -1},
		"attempt-metadata": &Attempt{Service: "S", Method: "M", Payload: []byte{7},
			Metadata: []string{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-user", ""}},
		"heartbeat": &Heartbeat{Items: []HeartbeatItem{
			{Call: 1}, {Call: 1 << 40, Progress: []byte("p")},
		}},
		"heartbeat-empty": &Heartbeat{},
		"heartbeat-all":   &Heartbeat{All: true, Items: []HeartbeatItem{{Call: 5, Progress: []byte("q")}}},
		"result":          &Result{Call: 7, Status: StatusOK, Payload: []byte("ok")},
		"result-fail":     &Result{Call: 8, Status: StatusFail, Code: "ErrInsufficientFunds", Message: "insufficient funds"},
		"result-failover": &Result{Call: 9, Status: StatusFailover, Message: "busy"},
		"cancel":          &Cancel{Call: 1<<64 - 1},
		"redirect":        &Redirect{Call: 3, Node: "node-c", Addr: "10.0.0.3:7000"},
		"redirect-ran":    &Redirect{Call: 4, Node: "node-d", Addr: "10.0.0.4:7000", MayHaveRun: true},
		"ack":             &Ack{Call: 1 << 33},
	}
}

// frameOpts treats nil and empty slices alike, as the format does, and
// compares byte slices whole rather than element by element.
var frameOpts = cmp.Options{
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() != reflect.TypeFor[[]byte]() }, cmpopts.EquateEmpty()),
	cmp.Comparer(bytes.Equal),
}

// encode returns f without its length prefix, as Decode takes it.
func encode(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f, 0)
	if err != nil {
		t.Fatalf("AppendFrame(%T): %v", f, err)
	}
	if n := binary.BigEndian.Uint32(b); int(n) != len(b)-4 {
		t.Fatalf("length prefix %d, frame has %d bytes after it", n, len(b)-4)
	}
	return b[4:]
}

func TestFrameRoundTrip(t *testing.T) {
	for name, f := range sampleFrames() {
		t.Run(name, func(t *testing.T) {
			got, err := Decode(encode(t, f))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got.Type() != f.Type() {
				t.Fatalf("type %s, want %s", got.Type(), f.Type())
			}
			if diff := cmp.Diff(f, got, frameOpts); diff != "" {
				t.Errorf("round trip mismatch (-sent +decoded):\n%s", diff)
			}
		})
	}
}

// TestAttemptMetadataOptional pins the rule that lets the field be added
// without a new frame version: an Attempt without metadata is the bytes of
// the older format, which ends with the payload, and metadata is appended
// after it, so only a call that sends metadata needs a peer that knows it.
func TestAttemptMetadataOptional(t *testing.T) {
	a := Attempt{Call: 1, Service: "S", Method: "M", Payload: []byte("args")}
	plain := encode(t, &a)
	if !bytes.HasSuffix(plain, []byte("\x04args")) {
		t.Fatalf("an Attempt without metadata must end with its payload: % x", plain)
	}
	a.Metadata = []string{"k", "v"}
	with := encode(t, &a)
	if !bytes.Equal(with[:len(plain)], plain) {
		t.Fatalf("metadata changed the bytes before it:\n% x\n% x", plain, with)
	}
	if tail := with[len(plain):]; !bytes.Equal(tail, []byte{1, 1, 'k', 1, 'v'}) {
		t.Errorf("metadata encoded as % x, want 01 01 6b 01 76", tail)
	}
}

// A heartbeat without All is the same bytes as before the field existed,
// so an older client, which gets none with it, decodes every heartbeat it
// gets; one with All ends in a single byte, and a decoder that reused its
// Heartbeat does not carry All over to the next.
func TestHeartbeatAllOptional(t *testing.T) {
	hb := Heartbeat{Items: []HeartbeatItem{{Call: 3}}}
	plain := encode(t, &hb)
	if want := []byte{Version, byte(TypeHeartbeat), 1, 3, 0}; !bytes.Equal(plain, want) {
		t.Fatalf("heartbeat without All encoded as % x, want % x", plain, want)
	}
	hb.All = true
	with := encode(t, &hb)
	if !bytes.Equal(with, append(plain, 1)) {
		t.Fatalf("All encoded as % x, want % x followed by 01", with, plain)
	}
	var d Decoder
	for _, c := range []struct {
		in  []byte
		all bool
	}{{with, true}, {plain, false}} {
		f, err := d.Decode(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.(*Heartbeat); got.All != c.all || len(got.Items) != 1 {
			t.Errorf("decoded % x as %+v, want All %v and one item", c.in, got, c.all)
		}
	}
	if _, err := d.Decode(append(plain, 2)); !errors.Is(err, ErrMalformedFrame) {
		t.Errorf("a heartbeat ending in 02 decoded with error %v, want ErrMalformedFrame", err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	valid := encode(t, &Result{Call: 7, Status: StatusFail, Code: "c", Message: "m"})
	with := func(p []byte, edit func([]byte) []byte) []byte {
		return edit(append([]byte(nil), p...))
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformedFrame},
		{"one byte", []byte{Version}, ErrMalformedFrame},
		{"version 0", with(valid, func(p []byte) []byte { p[0] = 0; return p }), ErrBadVersion},
		{"version 2", with(valid, func(p []byte) []byte { p[0] = 2; return p }), ErrBadVersion},
		{"type 0", []byte{Version, 0}, ErrUnknownType},
		{"type 99", []byte{Version, 99, 1, 2}, ErrUnknownType},
		{"truncated body", valid[:len(valid)-1], ErrMalformedFrame},
		{"trailing bytes", with(valid, func(p []byte) []byte { return append(p, 0) }), ErrMalformedFrame},
		{"bad status", with(valid, func(p []byte) []byte { p[3] = 9; return p }), ErrMalformedFrame},
		{"empty cancel", []byte{Version, byte(TypeCancel)}, ErrMalformedFrame},
		{"varint overflow", append([]byte{Version, byte(TypeCancel)}, bytes.Repeat([]byte{0xff}, 11)...), ErrMalformedFrame},
		{"forged heartbeat count", []byte{Version, byte(TypeHeartbeat), 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMalformedFrame},
		{"forged string length", []byte{Version, byte(TypeRedirect), 1, 0xff, 0xff, 0x03, 'a'}, ErrMalformedFrame},
		{"attempt number overflows uint32", attemptWithNumber(1 << 32), ErrMalformedFrame},
		{"forged metadata count", append(encode(t, &Attempt{Service: "S", Method: "M"}), 0xff, 0xff, 0x03, 1, 'k'), ErrMalformedFrame},
		{"zero metadata pairs", append(encode(t, &Attempt{Service: "S", Method: "M"}), 0), ErrMalformedFrame},
		{"truncated metadata", func() []byte {
			p := encode(t, &Attempt{Service: "S", Method: "M", Metadata: []string{"k", "value"}})
			return p[:len(p)-1]
		}(), ErrMalformedFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Decode(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %v, %v; want error matching %v", f, err, tt.want)
			}
			if f != nil {
				t.Errorf("Decode returned frame %v with error", f)
			}
		})
	}
}

// attemptWithNumber encodes an Attempt whose Number field holds n, which
// may not fit the uint32 it decodes into.
func attemptWithNumber(n uint64) []byte {
	b := []byte{Version, byte(TypeAttempt), 1}
	b = append(b, make([]byte, 16)...)
	b = binary.AppendUvarint(b, n)
	return append(b, make([]byte, 8)...)
}

func TestAppendFrameTooLarge(t *testing.T) {
	prefix := []byte("keep")
	b, err := AppendFrame(prefix, &Result{Payload: make([]byte, 100)}, 64)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v, want ErrFrameTooLarge", err)
	}
	if string(b) != "keep" {
		t.Errorf("buffer = %q after a failed append, want it unchanged", b)
	}
}

func TestFrameLen(t *testing.T) {
	tests := []struct {
		n    uint32
		want error
	}{
		{0, ErrMalformedFrame},
		{1, ErrMalformedFrame},
		{2, nil},
		{DefaultMaxFrameSize, nil},
		{DefaultMaxFrameSize + 1, ErrFrameTooLarge},
		{1<<32 - 1, ErrFrameTooLarge},
	}
	for _, tt := range tests {
		_, err := FrameLen(binary.BigEndian.AppendUint32(nil, tt.n), 0)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("FrameLen(%d) error = %v, want %v", tt.n, err, tt.want)
		}
	}
}

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
	src := &trickle{data: append(hdr, Version, byte(TypeResult)), limit: 1 << 20}
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
	stream, err := AppendFrame(nil, &Result{Call: 1, Payload: make([]byte, size)}, 0)
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
	stream, err := AppendFrame(nil, &Result{Call: 1, Payload: make([]byte, 1<<20)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := newFrameReader(bytes.NewReader(stream), DefaultMaxFrameSize, g)
	p, err := c.next()
	if err != nil {
		t.Fatalf("the same frame after the stalled one ended: %v", err)
	}
	if f, err := Decode(p); err != nil || len(f.(*Result).Payload) != 1<<20 {
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
	for _, f := range []Frame{&Result{Call: 1, Payload: make([]byte, 1<<20)}, &Cancel{Call: 2}} {
		var err error
		if stream, err = AppendFrame(stream, f, 0); err != nil {
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
	if f, err := Decode(p); err != nil || f.(*Cancel).Call != 2 {
		t.Fatalf("second frame: %v, %v", f, err)
	}
	if len(fr.buf) > baseReadBuffer || g.buffered.Load() != 0 {
		t.Errorf("after the large frame: buffer %d bytes, %d charged; want <= %d and 0", len(fr.buf), g.buffered.Load(), baseReadBuffer)
	}
}

func TestFrameReaderStream(t *testing.T) {
	big := &Result{Call: 1, Payload: bytes.Repeat([]byte{7}, baseReadBuffer+10)}
	frames := []Frame{&Cancel{Call: 1}, big, &Heartbeat{Items: []HeartbeatItem{{Call: 2}}}, &Cancel{Call: 3}}
	var stream []byte
	for _, f := range frames {
		var err error
		if stream, err = AppendFrame(stream, f, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Reads of 1 and 4096 bytes in turn split frames and headers anywhere.
	fr := newFrameReader(&shortReader{r: bytes.NewReader(stream)}, DefaultMaxFrameSize, nil)
	var d Decoder
	for i, want := range frames {
		p, err := fr.next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got, err := d.Decode(p)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if diff := cmp.Diff(want, got, frameOpts); diff != "" {
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

func TestFrameTypeAndStatusStrings(t *testing.T) {
	for f := range strings.SplitSeq("hello attempt heartbeat result cancel redirect", " ") {
		found := false
		for _, fr := range sampleFrames() {
			found = found || fr.Type().String() == f
		}
		if !found {
			t.Errorf("no frame type prints as %q", f)
		}
	}
	if got := FrameType(200).String(); got != "type(200)" {
		t.Errorf("FrameType(200) = %q", got)
	}
	if got := Status(7).String(); got != "status(7)" {
		t.Errorf("Status(7) = %q", got)
	}
}

// held is what the reader's buffers take.
func (r *frameReader) held() int {
	n := len(r.buf) + cap(r.big)
	for _, c := range r.chunks {
		n += cap(c)
	}
	return n
}

// An Ack goes with nearly every attempt: it must cost no allocation on
// either end.
func TestAckAllocs(t *testing.T) {
	ack := &Ack{Call: 1 << 40}
	buf := make([]byte, 0, 64)
	var err error
	if n := testing.AllocsPerRun(100, func() {
		buf, err = AppendFrame(buf[:0], ack, 0)
	}); n != 0 || err != nil {
		t.Errorf("ack encode: %v allocs/op, error %v; want 0", n, err)
	}
	var d Decoder
	p := buf[4:]
	if n := testing.AllocsPerRun(100, func() {
		f, err := d.Decode(p)
		if err != nil || f.(*Ack).Call != 1<<40 {
			t.Fatalf("decode: %v, %v", f, err)
		}
	}); n != 0 {
		t.Errorf("ack decode: %v allocs/op; want 0", n)
	}
}
