package frame_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
)

// encode returns f without its length prefix, as Decode takes it.
func encode(t testing.TB, f frame.Frame) []byte {
	t.Helper()
	b, err := frame.Append(nil, f, 0)
	if err != nil {
		t.Fatalf("Append(%T): %v", f, err)
	}
	if n := binary.BigEndian.Uint32(b); int(n) != len(b)-4 {
		t.Fatalf("length prefix %d, frame has %d bytes after it", n, len(b)-4)
	}
	return b[4:]
}

func TestFrameRoundTrip(t *testing.T) {
	for name, f := range frametest.Samples() {
		t.Run(name, func(t *testing.T) {
			got, err := frame.Decode(encode(t, f))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got.Type() != f.Type() {
				t.Fatalf("type %s, want %s", got.Type(), f.Type())
			}
			if diff := cmp.Diff(f, got, frametest.Opts); diff != "" {
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
	a := frame.Attempt{Call: 1, Service: "S", Method: "M", Payload: []byte("args")}
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
	hb := frame.Heartbeat{Items: []frame.HeartbeatItem{{Call: 3}}}
	plain := encode(t, &hb)
	if want := []byte{frame.Version, byte(frame.TypeHeartbeat), 1, 3, 0}; !bytes.Equal(plain, want) {
		t.Fatalf("heartbeat without All encoded as % x, want % x", plain, want)
	}
	hb.All = true
	with := encode(t, &hb)
	if !bytes.Equal(with, append(plain, 1)) {
		t.Fatalf("All encoded as % x, want % x followed by 01", with, plain)
	}
	var d frame.Decoder
	for _, c := range []struct {
		in  []byte
		all bool
	}{{with, true}, {plain, false}} {
		f, err := d.Decode(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.(*frame.Heartbeat); got.All != c.all || len(got.Items) != 1 {
			t.Errorf("decoded % x as %+v, want All %v and one item", c.in, got, c.all)
		}
	}
	if _, err := d.Decode(append(plain, 2)); !errors.Is(err, frame.ErrMalformed) {
		t.Errorf("a heartbeat ending in 02 decoded with error %v, want ErrMalformed", err)
	}
}

// A heartbeat's lateness (revision 2) follows All, written then even when
// false, in microseconds; a heartbeat without it is the bytes it was, and
// a decoder that reused its Heartbeat does not carry it over to the next.
func TestHeartbeatLateOptional(t *testing.T) {
	hb := frame.Heartbeat{Items: []frame.HeartbeatItem{{Call: 3}}}
	plain := encode(t, &hb)
	hb.Late = 150 * time.Millisecond
	late := encode(t, &hb)
	if want := append(append([]byte(nil), plain...), 0, 0xf0, 0x93, 0x09); !bytes.Equal(late, want) {
		t.Fatalf("Late encoded as % x, want % x", late, want)
	}
	hb.All = true
	both := encode(t, &hb)
	var d frame.Decoder
	for _, c := range []struct {
		in   []byte
		all  bool
		late time.Duration
	}{{late, false, 150 * time.Millisecond}, {both, true, 150 * time.Millisecond}, {plain, false, 0}} {
		f, err := d.Decode(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.(*frame.Heartbeat); got.All != c.all || got.Late != c.late || len(got.Items) != 1 {
			t.Errorf("decoded % x as %+v, want All %v, Late %v and one item", c.in, got, c.all, c.late)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	valid := encode(t, &frame.Result{Call: 7, Status: frame.StatusFail, Code: "c", Message: "m"})
	with := func(p []byte, edit func([]byte) []byte) []byte {
		return edit(append([]byte(nil), p...))
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, frame.ErrMalformed},
		{"one byte", []byte{frame.Version}, frame.ErrMalformed},
		{"version 0", with(valid, func(p []byte) []byte { p[0] = 0; return p }), frame.ErrBadVersion},
		{"version 2", with(valid, func(p []byte) []byte { p[0] = 2; return p }), frame.ErrBadVersion},
		{"type 0", []byte{frame.Version, 0}, frame.ErrUnknownType},
		{"type 99", []byte{frame.Version, 99, 1, 2}, frame.ErrUnknownType},
		{"truncated body", valid[:len(valid)-1], frame.ErrMalformed},
		{"trailing bytes", with(valid, func(p []byte) []byte { return append(p, 0) }), frame.ErrMalformed},
		{"bad status", with(valid, func(p []byte) []byte { p[3] = 9; return p }), frame.ErrMalformed},
		{"empty cancel", []byte{frame.Version, byte(frame.TypeCancel)}, frame.ErrMalformed},
		{"varint overflow", append([]byte{frame.Version, byte(frame.TypeCancel)}, bytes.Repeat([]byte{0xff}, 11)...), frame.ErrMalformed},
		{"forged heartbeat count", []byte{frame.Version, byte(frame.TypeHeartbeat), 0xff, 0xff, 0xff, 0xff, 0x0f}, frame.ErrMalformed},
		{"forged string length", []byte{frame.Version, byte(frame.TypeRedirect), 1, 0xff, 0xff, 0x03, 'a'}, frame.ErrMalformed},
		{"attempt number overflows uint32", attemptWithNumber(1 << 32), frame.ErrMalformed},
		{"forged metadata count", append(encode(t, &frame.Attempt{Service: "S", Method: "M"}), 0xff, 0xff, 0x03, 1, 'k'), frame.ErrMalformed},
		{"zero metadata pairs", append(encode(t, &frame.Attempt{Service: "S", Method: "M"}), 0), frame.ErrMalformed},
		{"truncated metadata", func() []byte {
			p := encode(t, &frame.Attempt{Service: "S", Method: "M", Metadata: []string{"k", "value"}})
			return p[:len(p)-1]
		}(), frame.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := frame.Decode(tt.in)
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
	b := []byte{frame.Version, byte(frame.TypeAttempt), 1}
	b = append(b, make([]byte, 16)...)
	b = binary.AppendUvarint(b, n)
	return append(b, make([]byte, 8)...)
}

func TestAppendTooLarge(t *testing.T) {
	prefix := []byte("keep")
	b, err := frame.Append(prefix, &frame.Result{Payload: make([]byte, 100)}, 64)
	if !errors.Is(err, frame.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if string(b) != "keep" {
		t.Errorf("buffer = %q after a failed append, want it unchanged", b)
	}
}

func TestLen(t *testing.T) {
	tests := []struct {
		n    uint32
		want error
	}{
		{0, frame.ErrMalformed},
		{1, frame.ErrMalformed},
		{2, nil},
		{frame.DefaultMaxSize, nil},
		{frame.DefaultMaxSize + 1, frame.ErrTooLarge},
		{1<<32 - 1, frame.ErrTooLarge},
	}
	for _, tt := range tests {
		_, err := frame.Len(binary.BigEndian.AppendUint32(nil, tt.n), 0)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("Len(%d) error = %v, want %v", tt.n, err, tt.want)
		}
	}
}

func TestTypeAndStatusStrings(t *testing.T) {
	for f := range strings.SplitSeq("hello attempt heartbeat result cancel redirect", " ") {
		found := false
		for _, fr := range frametest.Samples() {
			found = found || fr.Type().String() == f
		}
		if !found {
			t.Errorf("no frame type prints as %q", f)
		}
	}
	if got := frame.Type(200).String(); got != "type(200)" {
		t.Errorf("Type(200) = %q", got)
	}
	if got := frame.Status(7).String(); got != "status(7)" {
		t.Errorf("Status(7) = %q", got)
	}
}

// An Ack goes with nearly every attempt: it must cost no allocation on
// either end.
func TestAckAllocs(t *testing.T) {
	ack := &frame.Ack{Call: 1 << 40}
	buf := make([]byte, 0, 64)
	var err error
	if n := testing.AllocsPerRun(100, func() {
		buf, err = frame.Append(buf[:0], ack, 0)
	}); n != 0 || err != nil {
		t.Errorf("ack encode: %v allocs/op, error %v; want 0", n, err)
	}
	var d frame.Decoder
	p := buf[4:]
	if n := testing.AllocsPerRun(100, func() {
		f, err := d.Decode(p)
		if err != nil || f.(*frame.Ack).Call != 1<<40 {
			t.Fatalf("decode: %v, %v", f, err)
		}
	}); n != 0 {
		t.Errorf("ack decode: %v allocs/op; want 0", n)
	}
}
