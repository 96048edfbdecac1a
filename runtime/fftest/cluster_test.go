package fftest_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// serveLedger serves the test ledger, without replication, on every node
// of c and returns the nodes' ledgers by name.
func serveLedger(t *testing.T, c *fftest.Cluster) map[string]*testledger.Mem {
	ledgers := map[string]*testledger.Mem{}
	c.Serve(t, testledger.PlainDesc, func(n *fftest.Node) any {
		l := testledger.NewMem(n.Name)
		ledgers[n.Name] = l
		return l
	})
	return ledgers
}

// ranOn names the nodes whose ledgers ran op, e.g. "add e 1".
func ranOn(ledgers map[string]*testledger.Mem, op string) []string {
	var out []string
	for name, l := range ledgers {
		if slices.Contains(l.Log(), op) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

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
		ledgers := serveLedger(t, c)
		ledger := testledger.NewClient(c.Client(t))
		synctest.Wait()
		if _, err := ledger.Add(t.Context(), "e", 1); err != nil || len(ranOn(ledgers, "add e 1")) != 1 {
			t.Fatalf("Add ran on %v: %v; want one node of the cluster", ranOn(ledgers, "add e 1"), err)
		}
	})
}

func TestClusterKeepsExplicitZeroSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.MaxFailovers = 0
		c := fftest.New(t, fftest.Config{Settings: s})
		var calls atomic.Int32
		for _, l := range serveLedger(t, c) {
			l.SetHook(func(context.Context, string, int64) error { calls.Add(1); return testledger.ErrBusy })
		}
		ledger := testledger.NewClient(c.Client(t))
		synctest.Wait()
		_, err := ledger.Add(t.Context(), "e", 1)
		if !errors.Is(err, testledger.ErrBusy) || calls.Load() != 1 {
			t.Fatalf("err = %v after %d attempts; want ErrBusy after exactly 1 (MaxFailovers 0)", err, calls.Load())
		}
	})
}

func TestCrashRefusesConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{})
		serveLedger(t, c)
		ledger := testledger.NewClient(c.Client(t))
		synctest.Wait()
		c.Crash("a1")
		c.Crash("b1")
		_, err := ledger.Add(t.Context(), "e", 1)
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
		ledgers := serveLedger(t, c)
		for _, entity := range []string{"e1", "e2", "e3", "e4"} {
			ledger := testledger.NewClient(c.Client(t)) // a new client: the last one suspects the node it found paused
			owners := c.Owners(testledger.PlainDesc.Name, entity)
			if len(owners) != 3 || owners[0][0] == owners[1][0] || owners[1][0] == owners[2][0] || owners[0][0] == owners[2][0] {
				t.Fatalf("Owners(%s) = %v, want one node in each of the three groups", entity, owners)
			}
			first, second := "add "+entity+" 1", "add "+entity+" 2"
			if _, err := ledger.Add(t.Context(), entity, 1); err != nil || !slices.Equal(ranOn(ledgers, first), owners[:1]) {
				t.Fatalf("%s answered by %v (%v), want %s", entity, ranOn(ledgers, first), err, owners[0])
			}
			c.Net.Pause(owners[0])
			if _, err := ledger.Add(t.Context(), entity, 2); err != nil || !slices.Equal(ranOn(ledgers, second), owners[1:2]) {
				t.Fatalf("%s with %s paused answered by %v (%v), want %s", entity, owners[0], ranOn(ledgers, second), err, owners[1])
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
		ledgers := serveLedger(t, c)
		ledger := testledger.NewClient(c.Client(t))
		owners := c.Owners(testledger.PlainDesc.Name, "e")
		if _, err := ledger.Add(t.Context(), "e", 1); err != nil || !slices.Equal(ranOn(ledgers, "add e 1"), owners[:1]) {
			t.Fatalf("answered by %v (%v), want %s", ranOn(ledgers, "add e 1"), err, owners[0])
		}
		c.Net.Cut("client1", owners[0])
		start := time.Now()
		if _, err := ledger.Add(t.Context(), "e", 2); err != nil || !slices.Equal(ranOn(ledgers, "add e 2"), owners[1:2]) {
			t.Fatalf("answered by %v (%v), want %s after the cut", ranOn(ledgers, "add e 2"), err, owners[1])
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
			if err := conn.Send(&frame.Cancel{Call: call}); err != nil {
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

func (c cancels) HandleFrame(_ transport.Conn, f frame.Frame) {
	if f, ok := f.(*frame.Cancel); ok {
		c <- f.Call
	}
}

func (c cancels) HandleClose(transport.Conn, error) {}
