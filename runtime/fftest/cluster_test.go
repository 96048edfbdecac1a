package fftest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/transport"
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

// Owners names the node that answers, and the one that answers while the
// first is paused: the order a client tries them in.
func TestOwnersAreWhereOperationsGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{Groups: []string{"x", "y", "z"}, PerGroup: 2})
		c.Serve(t, whoDesc, func(n *fftest.Node) any {
			return func() (codec.Message, error) { return &key{S: n.Name}, nil }
		})
		for _, entity := range []string{"e1", "e2", "e3", "e4"} {
			cl := c.Client(t) // a new client: the last one suspects the node it found paused
			owners := c.Owners(whoDesc.Name, entity)
			if len(owners) != 3 || owners[0][0] == owners[1][0] || owners[1][0] == owners[2][0] || owners[0][0] == owners[2][0] {
				t.Fatalf("Owners(%s) = %v, want one node in each of the three groups", entity, owners)
			}
			var got key
			if err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: entity}, &got); err != nil || got.S != owners[0] {
				t.Fatalf("%s answered by %q (%v), want %s", entity, got.S, err, owners[0])
			}
			c.Net.Pause(owners[0])
			if err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: entity}, &got); err != nil || got.S != owners[1] {
				t.Fatalf("%s with %s paused answered by %q (%v), want %s", entity, owners[0], got.S, err, owners[1])
			}
			c.Net.Resume(owners[0])
		}
		if got := c.Owners("no.Such", "e1"); len(got) != 0 {
			t.Errorf("Owners of an unserved service = %v, want none", got)
		}
	})
}

// A cut link drops frames silently: the client hears no heartbeat and
// fails over.
func TestCutLinkFailsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{})
		c.Serve(t, whoDesc, func(n *fftest.Node) any {
			return func() (codec.Message, error) { return &key{S: n.Name}, nil }
		})
		cl := c.Client(t)
		owners := c.Owners(whoDesc.Name, "e")
		var got key
		if err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: "e"}, &got); err != nil || got.S != owners[0] {
			t.Fatalf("answered by %q (%v), want %s", got.S, err, owners[0])
		}
		c.Net.Cut("client1", owners[0])
		start := time.Now()
		if err := cl.Invoke(t.Context(), whoDesc.Methods[0], &key{S: "e"}, &got); err != nil || got.S != owners[1] {
			t.Fatalf("answered by %q (%v), want %s after the cut", got.S, err, owners[1])
		}
		if d := time.Since(start); d < c.Settings.HeartbeatTimeout {
			t.Errorf("failed over after %v, before the heartbeat timeout", d)
		}
		if c.Net.Dropped() == 0 {
			t.Error("the cut dropped no frame")
		}
	})
}

// A network a test makes for itself: frames wait while a node is paused
// and arrive, in order, when it resumes.
func TestNewNetworkHoldsFramesOfAPausedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := fftest.NewNetwork()
		defer n.Close()
		got := make(chan uint64, 4)
		if _, err := n.Transport(transport.Config{Node: "s"}).Listen("", cancels(got)); err != nil {
			t.Fatal(err)
		}
		conn, err := n.Transport(transport.Config{Node: "c"}).Dial(t.Context(), "s", cancels(nil))
		if err != nil {
			t.Fatal(err)
		}
		n.Pause("s")
		for call := range uint64(3) {
			if err := conn.Send(&transport.Cancel{Call: call}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Minute)
		if len(got) != 0 {
			t.Fatalf("a paused node received %d frames", len(got))
		}
		n.Resume("s")
		for want := range uint64(3) {
			if call := <-got; call != want {
				t.Fatalf("frame %d arrived as %d", want, call)
			}
		}
	})
}

// cancels passes on the call numbers of the Cancel frames it receives.
type cancels chan uint64

func (c cancels) HandleFrame(_ transport.Conn, f transport.Frame) {
	if f, ok := f.(*transport.Cancel); ok {
		c <- f.Call
	}
}

func (c cancels) HandleClose(transport.Conn, error) {}
