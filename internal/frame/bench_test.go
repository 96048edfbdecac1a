package frame_test

import (
	"sort"
	"testing"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
)

func sortedSamples() ([]string, map[string]frame.Frame) {
	frames := frametest.Samples()
	names := make([]string, 0, len(frames))
	for name := range frames {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, frames
}

func BenchmarkEncode(b *testing.B) {
	names, frames := sortedSamples()
	for _, name := range names {
		f := frames[name]
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = frame.Append(buf[:0], f, 0)
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	names, frames := sortedSamples()
	for _, name := range names {
		p := encode(b, frames[name])
		b.Run(name, func(b *testing.B) {
			var d frame.Decoder
			b.ReportAllocs()
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := d.Decode(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Heartbeats are the most frequent frame: one per connection per interval
// whatever the load, so their hot path must not allocate.
func TestHeartbeatAllocs(t *testing.T) {
	hb := &frame.Heartbeat{Items: make([]frame.HeartbeatItem, 64)}
	for i := range hb.Items {
		hb.Items[i] = frame.HeartbeatItem{Call: uint64(i) << 20, Progress: []byte("step")}
	}
	buf := make([]byte, 0, 4096)
	var err error
	if n := testing.AllocsPerRun(100, func() {
		buf, err = frame.Append(buf[:0], hb, 0)
	}); n != 0 || err != nil {
		t.Errorf("heartbeat encode: %v allocs/op, error %v; want 0", n, err)
	}
	var d frame.Decoder
	p := buf[4:]
	if n := testing.AllocsPerRun(100, func() {
		f, err := d.Decode(p)
		if err != nil || len(f.(*frame.Heartbeat).Items) != 64 {
			t.Fatalf("decode: %v, %v", f, err)
		}
	}); n != 0 {
		t.Errorf("heartbeat decode: %v allocs/op; want 0", n)
	}
}
