package frame_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic,
// and a frame it accepts must survive re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, fr := range frametest.Samples() {
		b, err := frame.Append(nil, fr, 0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[4:])
	}
	f.Add([]byte{})
	f.Add([]byte{frame.Version, byte(frame.TypeHeartbeat), 0xff, 0xff, 0xff, 0xff, 0x0f})

	f.Fuzz(func(t *testing.T, p []byte) {
		var d frame.Decoder
		got, err := d.Decode(p)
		if err != nil {
			if !frame.IsInvalid(err) {
				t.Fatalf("Decode error %v matches no protocol sentinel", err)
			}
			return
		}
		again, err := frame.Append(nil, got, 1<<30)
		if err != nil {
			t.Fatalf("re-encoding %#v: %v", got, err)
		}
		// A fresh decoder: d's heartbeat would alias the one being compared.
		back, err := frame.Decode(again[4:])
		if err != nil {
			t.Fatalf("decoding the re-encoded %#v: %v", got, err)
		}
		if diff := cmp.Diff(got, back, frametest.Opts); diff != "" {
			t.Fatalf("re-encode round trip mismatch (-first +second):\n%s", diff)
		}
	})
}
