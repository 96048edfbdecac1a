package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

// BenchmarkReplicatedWriteTCP measures what ordering costs a healthy write:
// four nodes on loopback TCP (a1 a2 | b1 b2), one caller, one write at a
// time. "sequenced" is a scatter write through the sequencer, committed on
// a quorum and run on every node. "fanout" is the scatter this replaced, in
// the same run: the caller sends the write to all four nodes at once and
// takes the first answer, the other copies running on (as the old client
// did). p50-µs and p99-µs are reported per variant; compare their ratio.
func BenchmarkReplicatedWriteTCP(b *testing.B) {
	b.Run("sequenced", func(b *testing.B) {
		lc := replicatedTCP(b)
		ctx := context.Background()
		lats := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			start := time.Now()
			if _, err := lc.Add(ctx, accounts[i%len(accounts)], 1); err != nil {
				b.Fatal(err)
			}
			lats = append(lats, time.Since(start))
		}
		reportLatency(b, lats)
	})
	b.Run("fanout", func(b *testing.B) {
		clients := fanoutTCP(b)
		ctx := context.Background()
		lats := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			start := time.Now()
			first := make(chan error, len(clients))
			for _, lc := range clients {
				go func() {
					_, err := lc.Add(ctx, accounts[i%len(accounts)], 1)
					first <- err
				}()
			}
			if err := <-first; err != nil {
				b.Fatal(err)
			}
			lats = append(lats, time.Since(start))
		}
		reportLatency(b, lats)
	})
}

func reportLatency(b *testing.B, lats []time.Duration) {
	if len(lats) == 0 {
		return
	}
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
}

// replicatedTCP starts four replicas and returns a client whose Add is a
// scatter write.
func replicatedTCP(b *testing.B) *ledgerClient {
	s := testSettings()
	members := runtime.NewStaticMembership()
	var servers []*runtime.Server
	var ms []runtime.Member
	for _, name := range []string{"a1", "a2", "b1", "b2"} {
		tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: name[:1], Logger: quietLogger()}})
		if err != nil {
			b.Fatal(err)
		}
		srv := runtime.NewServer(runtime.ServerConfig{Settings: s, Logger: quietLogger(), Node: name, Membership: members})
		l := newMemLedger(name)
		l.lean = true
		if err := srv.Register(ledgerDesc, l); err != nil {
			b.Fatal(err)
		}
		ln, err := srv.Serve(tp, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		servers = append(servers, srv)
		ms = append(ms, runtime.Member{Name: name, Group: name[:1], Addr: ln.Addr(), Services: []string{ledgerDesc.Name}})
	}
	members.Set(ms)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range servers {
			srv.Shutdown(ctx)
		}
	})
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		ready := true
		for _, srv := range servers {
			ready = ready && srv.Ready() == nil
		}
		if ready {
			break
		}
		if time.Since(start) > 30*time.Second {
			b.Fatal("replicas not ready")
		}
	}
	lc := newLedgerClient(benchClient(b, "client", members, s))
	lc.add = scatterAdd()
	if _, err := lc.Add(context.Background(), "warm", 1); err != nil {
		b.Fatal(err)
	}
	return lc
}

// fanoutTCP starts four independent nodes and one client per node, each
// seeing only its node.
func fanoutTCP(b *testing.B) []*ledgerClient {
	s := testSettings()
	var out []*ledgerClient
	for _, name := range []string{"a1", "a2", "b1", "b2"} {
		tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: name[:1], Logger: quietLogger()}})
		if err != nil {
			b.Fatal(err)
		}
		srv := runtime.NewServer(runtime.ServerConfig{Settings: s, Logger: quietLogger()})
		l := newMemLedger(name)
		l.lean = true
		if err := srv.Register(ledgerDesc, l); err != nil {
			b.Fatal(err)
		}
		ln, err := srv.Serve(tp, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		})
		// The node is in both groups' place: every key routes to it.
		view := runtime.NewStaticMembership(
			runtime.Member{Name: name, Group: "a", Addr: ln.Addr(), Services: []string{ledgerDesc.Name}},
			runtime.Member{Name: name + "-b", Group: "b", Addr: ln.Addr(), Services: []string{ledgerDesc.Name}},
		)
		lc := newLedgerClient(benchClient(b, "client-"+name, view, s))
		if _, err := lc.Add(context.Background(), "warm", 1); err != nil {
			b.Fatal(err)
		}
		out = append(out, lc)
	}
	return out
}

func benchClient(b *testing.B, name string, m runtime.Membership, s runtime.Settings) *runtime.Client {
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: "clients", Logger: quietLogger()}})
	if err != nil {
		b.Fatal(fmt.Errorf("client transport: %w", err))
	}
	c, err := runtime.NewClient(runtime.ClientConfig{Transport: tp, Membership: m, Settings: s, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}
