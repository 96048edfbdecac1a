package runtime_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// BenchmarkReplicatedWrite measures what replication costs a healthy
// scatter write: four nodes on loopback TCP (a1 a2 | b1 b2) forming one
// raft group, one client. "sequential" is one caller, one write at a time;
// "callers-64" is 64 goroutines sharing the client over b.N writes. Each
// reports p50-µs and p99-µs of the acknowledged writes, ops/s, errors (the
// writes that failed: counted, not fatal), failovers (the client's moves to
// another node, each an attempt lost), attempts/write (redirects to the
// leader included) and new-terms (how many terms began during the timed
// writes: elections, which a healthy cluster should not hold).
//
// bench/replication runs the same benchmark on the protocol raft replaced,
// in the same run: keep the two files alike.
func BenchmarkReplicatedWrite(b *testing.B) {
	b.Run("sequential", func(b *testing.B) { replicatedWrites(b, 1) })
	b.Run("callers-64", func(b *testing.B) { replicatedWrites(b, 64) })
}

// replicatedWrites issues b.N scatter writes from callers goroutines on a
// fresh cluster and reports their latencies.
func replicatedWrites(b *testing.B, callers int) {
	lc, servers, cm := writeCluster(b)
	ctx := context.Background()
	// lats[i] is the latency of write i, or -1 if it failed.
	lats := make([]time.Duration, b.N)
	var next, errs atomic.Int64
	var firstErr error
	var once sync.Once
	// Past this many failures the cluster is broken, not slow.
	maxErrs := int64(max(10, b.N/100))
	termsBefore := writeTerm(servers)
	cm.attempts.Store(0)
	cm.failovers.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || errs.Load() > maxErrs {
					return
				}
				t0 := time.Now()
				if _, err := lc.Add(ctx, accounts[i%int64(len(accounts))], 1); err != nil {
					lats[i] = -1
					errs.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				lats[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := errs.Load(); n > maxErrs {
		b.Fatalf("%d writes failed, the first with: %v", n, firstErr)
	} else if n > 0 {
		b.Logf("%d of %d writes failed, the first with: %v", n, b.N, firstErr)
	}
	reportWrites(b, lats, elapsed, errs.Load(), cm, writeTerm(servers)-termsBefore)
}

// writeMetrics counts the client's attempts and failovers.
type writeMetrics struct {
	runtime.NopMetrics
	attempts, failovers atomic.Int64
}

func (m *writeMetrics) AttemptStarted(string, string)           { m.attempts.Add(1) }
func (m *writeMetrics) Failover(string, string, runtime.Reason) { m.failovers.Add(1) }

// reportWrites reports the latencies of the writes that succeeded, how
// many did per second, and what went wrong on the way.
func reportWrites(b *testing.B, lats []time.Duration, elapsed time.Duration, errs int64, cm *writeMetrics, newTerms uint64) {
	ok := slices.DeleteFunc(lats, func(d time.Duration) bool { return d < 0 })
	b.ReportMetric(float64(errs), "errors")
	b.ReportMetric(float64(cm.failovers.Load()), "failovers")
	b.ReportMetric(float64(cm.attempts.Load())/float64(b.N), "attempts/write")
	b.ReportMetric(float64(newTerms), "new-terms")
	if len(ok) == 0 {
		return
	}
	slices.Sort(ok)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(ok[len(ok)/2]), "p50-µs")
	b.ReportMetric(us(ok[len(ok)*99/100]), "p99-µs")
	b.ReportMetric(float64(len(ok))/elapsed.Seconds(), "ops/s")
}

// writeTerm is the newest raft term any of the servers knows.
func writeTerm(servers []*runtime.Server) uint64 {
	var term uint64
	for _, srv := range servers {
		for _, st := range srv.Replication() {
			term = max(term, st.Term)
		}
	}
	return term
}

// writeCluster starts four replicas of the ledger, waits until each of
// them is ready (the group has elected a leader), and returns a client
// whose Add is a scatter write.
func writeCluster(b *testing.B) (*testledger.Client, []*runtime.Server, *writeMetrics) {
	s := testSettings()
	names := []string{"a1", "a2", "b1", "b2"}
	members := runtime.NewStaticMembership()
	var servers []*runtime.Server
	var ms []runtime.Member
	for _, name := range names {
		tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: name[:1], Logger: testkit.Logger(b)}})
		if err != nil {
			b.Fatal(err)
		}
		srv := runtime.NewServer(runtime.ServerConfig{Settings: s, Logger: testkit.Logger(b), Node: name, Membership: members,
			Replication: runtime.ReplicationConfig{Voters: names}})
		l := testledger.NewMem(name)
		l.Lean = true
		if err := srv.Register(testledger.Desc, l); err != nil {
			b.Fatal(err)
		}
		ln, err := srv.Serve(tp, "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		servers = append(servers, srv)
		ms = append(ms, runtime.Member{Name: name, Group: name[:1], Addr: ln.Addr(), Services: []string{testledger.Desc.Name}})
	}
	members.Set(ms)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, srv := range servers {
			srv.Shutdown(ctx)
		}
	})
	var notReady error
	ready := func() bool {
		notReady = nil
		for _, srv := range servers {
			if err := srv.Ready(); err != nil {
				notReady = err
			}
		}
		return notReady == nil
	}
	if !testkit.Within(30*time.Second, ready) {
		b.Fatalf("replicas not ready within 30s: %v", notReady)
	}
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "client", Group: "clients", Logger: testkit.Logger(b)}})
	if err != nil {
		b.Fatal(err)
	}
	cm := new(writeMetrics)
	c, err := runtime.NewClient(runtime.ClientConfig{Transport: tp, Membership: members, Settings: s, Logger: testkit.Logger(b), Metrics: cm})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	lc := testledger.NewClient(c)
	lc.AddMethod = scatterAdd()
	if _, err := lc.Add(context.Background(), "warm", 1); err != nil {
		b.Fatal(err)
	}
	return lc, servers, cm
}
