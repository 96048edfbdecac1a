package runtime_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/transport"
)

// splitCluster is four replicas (a1 a2 | b1 b2), each with a membership
// of its own, so that a partition can let each side's membership declare
// the other side dead, as memberlist would after its timeouts.
type splitCluster struct {
	net     *fftest.Network
	all     []runtime.Member
	views   map[string]*runtime.StaticMembership
	servers map[string]*runtime.Server
	ledgers map[string]*memLedger
	s       runtime.Settings
}

func newSplitCluster(t *testing.T) *splitCluster {
	c := &splitCluster{
		net:     fftest.NewNetwork(),
		views:   map[string]*runtime.StaticMembership{},
		servers: map[string]*runtime.Server{},
		ledgers: map[string]*memLedger{},
		s:       runtime.DefaultSettings(),
	}
	c.s.Groups = []string{"a", "b"}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, name := range []string{"a1", "a2", "b1", "b2"} {
		c.views[name] = runtime.NewStaticMembership()
		srv := runtime.NewServer(runtime.ServerConfig{Settings: c.s, Logger: quiet, Node: name, Membership: c.views[name]})
		if _, err := srv.Serve(c.net.Transport(transport.Config{Node: name, Group: name[:1], Logger: quiet}), name); err != nil {
			t.Fatal(err)
		}
		c.ledgers[name] = newMemLedger(name)
		if err := srv.Register(ledgerDesc, c.ledgers[name]); err != nil {
			t.Fatal(err)
		}
		c.servers[name] = srv
		c.all = append(c.all, runtime.Member{Name: name, Group: name[:1], Addr: name, Services: []string{ledgerDesc.Name}})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, s := range c.servers {
			s.Shutdown(ctx)
		}
		c.net.Close()
	})
	c.see(c.all...)
	c.waitReady(t)
	return c
}

// see sets the membership every listed node sees to the listed nodes.
func (c *splitCluster) see(ms ...runtime.Member) {
	for _, m := range ms {
		c.views[m.Name].Set(ms)
	}
}

func (c *splitCluster) side(group string) []runtime.Member {
	var out []runtime.Member
	for _, m := range c.all {
		if m.Group == group {
			out = append(out, m)
		}
	}
	return out
}

func (c *splitCluster) waitReady(t *testing.T) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		ready := true
		for _, s := range c.servers {
			ready = ready && s.Ready() == nil
		}
		if ready {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("replicas not ready")
		}
	}
}

// client returns a typed client that sees ms.
func (c *splitCluster) client(t *testing.T, name string, ms ...runtime.Member) *ledgerClient {
	cl, err := runtime.NewClient(runtime.ClientConfig{
		Transport:  c.net.Transport(transport.Config{Node: name, Group: "clients"}),
		Membership: runtime.NewStaticMembership(ms...),
		Settings:   c.s,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	lc := newLedgerClient(cl)
	lc.add = scatterAdd()
	return lc
}

// A partition whose sides each declare the other dead lets both sides
// commit writes: the gamble. When the sides meet again, the newer epoch
// wins; the other side's nodes record the divergence with the entities
// their lost writes touched, and take the winner's state.
func TestDivergenceIsDetectedAndResolved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSplitCluster(t)
		ctx := t.Context()
		everyone := c.client(t, "c0", c.all...)
		if _, err := everyone.Add(ctx, "base", 1); err != nil {
			t.Fatal(err)
		}
		for _, a := range c.side("a") {
			for _, b := range c.side("b") {
				c.net.CutBoth(a.Name, b.Name)
			}
		}
		c.see(c.side("a")...)
		c.see(c.side("b")...)
		onA := c.client(t, "ca", c.side("a")...)
		onB := c.client(t, "cb", c.side("b")...)
		for range 3 {
			if _, err := onA.Add(ctx, "only-a", 1); err != nil {
				t.Fatalf("write on side a: %v", err)
			}
			if _, err := onB.Add(ctx, "only-b", 1); err != nil {
				t.Fatalf("write on side b: %v", err)
			}
		}
		c.net.HealAll()
		c.see(c.all...)
		// The next write makes the first-choice sequencer take over, with
		// an epoch newer than both sides'.
		if _, err := everyone.Add(ctx, "after", 1); err != nil {
			t.Fatalf("write after the heal: %v", err)
		}
		for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			equal := true
			for _, name := range []string{"a2", "b1", "b2"} {
				equal = equal && cmp.Equal(c.ledgers["a1"].balances(), c.ledgers[name].balances()) && c.servers[name].Ready() == nil
			}
			if equal && c.servers["a1"].Ready() == nil {
				break
			}
			if time.Since(start) > 30*time.Second {
				for name, l := range c.ledgers {
					t.Logf("%s: %v %+v", name, l.balances(), c.servers[name].Replication())
				}
				t.Fatal("replicas did not converge after the heal")
			}
		}
		synctest.Wait()
		got := c.ledgers["a1"].balances()
		wonA, wonB := got["only-a"] == 3, got["only-b"] == 3
		if wonA == wonB || got["after"] != 1 || got["base"] != 1 {
			t.Fatalf("balances after the heal = %v; want exactly one side's writes and both common ones", got)
		}
		loser := "b"
		lostEntity := "only-b"
		if wonB {
			loser, lostEntity = "a", "only-a"
		}
		for _, m := range c.all {
			divs := c.servers[m.Name].Replication()[0].Divergences
			switch {
			case m.Group == loser && len(divs) == 0:
				t.Errorf("%s (losing side %s) recorded no divergence", m.Name, loser)
			case m.Group == loser && !slices.Contains(divs[0].Entities, lostEntity):
				t.Errorf("%s's divergence lists %v, want %s among them", m.Name, divs[0].Entities, lostEntity)
			case m.Group != loser && len(divs) > 0:
				t.Errorf("%s (winning side) recorded a divergence: %+v", m.Name, divs)
			}
		}
	})
}
