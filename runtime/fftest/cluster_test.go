package fftest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// key is an argument and a result: one string.
type key struct{ S string }

func (k *key) AppendFF(b []byte) []byte { return codec.AppendString(b, k.S) }
func (k *key) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	k.S = r.String()
	return r.Done()
}

var errBusy = errors.New("busy")

// whoDesc answers with the node's name, or fails over with errBusy.
var whoDesc = &runtime.ServiceDesc{Name: "test.Who", Methods: []*runtime.MethodDesc{{
	Service: "test.Who", Name: "Who",
	Errors: []runtime.ErrorRule{{Code: "errBusy", Directive: runtime.Failover,
		Match: func(err error) bool { return errors.Is(err, errBusy) }, Decode: func(string, []byte) error { return errBusy }}},
	Entities: func(args codec.Message, dst []string) []string { return append(dst, args.(*key).S) },
	NewArgs:  func() codec.Message { return new(key) },
	Handle: func(ctx context.Context, impl any, _ codec.Message) (codec.Message, error) {
		return impl.(func() (codec.Message, error))()
	},
}}}

func TestClusterNamesNodesAndServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{Groups: []string{"x", "y", "z"}, PerGroup: 2})
		var names []string
		for _, n := range c.Nodes {
			names = append(names, n.Name)
		}
		if got := len(names); got != 6 || names[0] != "x1" || names[5] != "z2" {
			t.Fatalf("nodes %v, want x1..z2", names)
		}
		if c.Settings.HeartbeatTimeout != runtime.DefaultSettings().HeartbeatTimeout {
			t.Errorf("zero settings did not take the defaults: %+v", c.Settings)
		}
		c.Serve(t, whoDesc, func(n *fftest.Node) any {
			return func() (codec.Message, error) { return &key{S: n.Name}, nil }
		})
		cl := c.Client(t)
		synctest.Wait()
		var got key
		if err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: "e"}, &got); err != nil || c.Node(got.S) == nil {
			t.Fatalf("Invoke = %q, %v", got.S, err)
		}
	})
}

func TestClusterKeepsExplicitZeroSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.MaxFailovers = 0
		c := fftest.New(t, fftest.Config{Settings: s})
		var calls atomic.Int32
		c.Serve(t, whoDesc, func(*fftest.Node) any {
			return func() (codec.Message, error) { calls.Add(1); return nil, errBusy }
		})
		cl := c.Client(t)
		synctest.Wait()
		err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: "e"}, new(key))
		if !errors.Is(err, errBusy) || calls.Load() != 1 {
			t.Fatalf("err = %v after %d attempts; want errBusy after exactly 1 (MaxFailovers 0)", err, calls.Load())
		}
	})
}

func TestCrashRefusesConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{})
		c.Serve(t, whoDesc, func(n *fftest.Node) any {
			return func() (codec.Message, error) { return &key{S: n.Name}, nil }
		})
		cl := c.Client(t)
		synctest.Wait()
		c.Crash("a1")
		c.Crash("b1")
		err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: "e"}, new(key))
		var fe *runtime.Error
		if !errors.As(err, &fe) || fe.Delivery != runtime.NotDelivered || fe.History[0].Reason != runtime.ReasonDialFailed {
			t.Fatalf("err = %v, want a dial failure, never delivered", err)
		}
	})
}
