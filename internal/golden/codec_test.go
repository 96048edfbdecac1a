package golden

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/golden/testdata/e2e"
	"github.com/ffgen/ffgen/internal/golden/testdata/shapes"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// echo returns what it was given, to carry every codec kind both ways.
type echo struct{}

func (echo) Log(context.Context, uint64, ...string) error { return nil }
func (echo) Deep(_ context.Context, o *shapes.Outer) (int, error) {
	if o == nil || o.In == nil || *o.In == nil || (*o.In).Shard == nil {
		return -1, nil
	}
	return int(*(*o.In).Shard), nil
}
func (echo) Big(_ context.Context, req shapes.Request) (*shapes.Request, shapes.Level, error) {
	return &req, shapes.Level(len(req.Counts)), nil
}
func (echo) Only(_ context.Context, l shapes.Level) error {
	if l < 0 {
		return shapes.NotFound{Key: "negative"}
	}
	return nil
}

func TestCodecRoundTripsEveryKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{})
		c.Serve(t, shapes.ShapesDesc, func(*fftest.Node) any { return echo{} })
		client := shapes.NewShapesClient(c.Client(t))
		synctest.Wait()

		req := shapes.Request{
			Embedded: shapes.Embedded{Tenant: "t1"},
			Raw:      shapes.Blob("raw"),
			Ratio:    0.5,
			Z:        complex(1, -2),
			When:     time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
			Cause:    errors.New("cause"),
			Grid:     [3][2]int{{1, 2}, {3, 4}, {5, -6}},
			Counts:   map[shapes.Level][]uint{-1: {1, 2}, 7: nil},
			List:     &shapes.Node{Value: 1, Next: &shapes.Node{Value: 2}},
			Flag:     true,
		}
		got, level, err := client.Big(t.Context(), req)
		if err != nil || level != 2 {
			t.Fatalf("Big = %v, %d, %v", got, level, err)
		}
		opts := cmp.Options{cmp.Comparer(func(a, b error) bool { return a.Error() == b.Error() })}
		if diff := cmp.Diff(&req, got, opts); diff != "" {
			t.Errorf("round trip (-sent +received):\n%s", diff)
		}

		shard := uint32(9)
		in := &shapes.Inner{Shard: &shard}
		if n, err := client.Deep(t.Context(), &shapes.Outer{In: &in, Name: "n"}); err != nil || n != 9 {
			t.Errorf("Deep = %d, %v; want 9", n, err)
		}
		// Nil pointers on the entity path route as "" and still arrive.
		if n, err := client.Deep(t.Context(), &shapes.Outer{}); err != nil || n != -1 {
			t.Errorf("Deep(empty) = %d, %v; want -1", n, err)
		}
		if n, err := client.Deep(t.Context(), nil); err != nil || n != -1 {
			t.Errorf("Deep(nil) = %d, %v; want -1", n, err)
		}
		// Only overrides the service's //ff:default failover with fail: an
		// undeclared error ends the operation after one attempt.
		err = client.Only(t.Context(), -1)
		var re *runtime.RemoteError
		var fe *runtime.Error
		if !errors.As(err, &re) || !errors.As(err, &fe) || len(fe.History) != 1 {
			t.Errorf("Only(-1) = %v, want a RemoteError after one attempt", err)
		}
	})
}

// FuzzUnmarshal feeds arbitrary bytes to every generated message: a
// decoder must return an error, never panic or allocate beyond its input.
func FuzzUnmarshal(f *testing.F) {
	var msgs []codec.Message
	for _, d := range []*runtime.ServiceDesc{shapes.ShapesDesc, e2e.LedgerDesc} {
		for _, m := range d.Methods {
			msgs = append(msgs, m.NewArgs())
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte("\x03t1\x03raw"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range msgs {
			if err := m.UnmarshalFF(b); err == nil {
				// Whatever decodes must encode again.
				m.AppendFF(nil)
			}
		}
	})
}
