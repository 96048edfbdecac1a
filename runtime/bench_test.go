package runtime_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/rpc"
	"os"
	goruntime "runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// BenchmarkInvokeTCP is one full call (client, loopback TCP, server
// handler, result) per op, next to net/rpc doing the same work in the same
// run. Allocations are client and server together: both live in this process.
func BenchmarkInvokeTCP(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("ffgen/callers=%d", callers), func(b *testing.B) {
			e := newTCPEnv(b, testSettings())
			for _, l := range e.ledgers {
				l.Lean = true
			}
			ctx := context.Background()
			if _, err := e.ledger.Add(ctx, "warm", 1); err != nil {
				b.Fatal(err)
			}
			runCallers(b, callers, func(i int) error {
				_, err := e.ledger.Add(ctx, accounts[i%len(accounts)], 1)
				return err
			})
		})
		b.Run(fmt.Sprintf("net-rpc/callers=%d", callers), func(b *testing.B) {
			c := startNetRPC(b)
			runCallers(b, callers, func(i int) error {
				var reply int64
				return c.Call("RPCLedger.Add", &RPCAddArgs{Account: accounts[i%len(accounts)], Amount: 1}, &reply)
			})
		})
	}
}

var accounts = func() []string {
	out := make([]string, 256)
	for i := range out {
		out[i] = fmt.Sprintf("acct-%d", i)
	}
	return out
}()

func runCallers(b *testing.B, callers int, call func(i int) error) {
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(created)
	before, cpu := created[0].Value.Uint64(), processCPU()
	defer func() {
		// Goroutines started per call, the callers' own aside: each
		// costs a stack, and often its growth, and a wake-up.
		metrics.Read(created)
		b.ReportMetric(float64(created[0].Value.Uint64()-before-uint64(callers))/float64(b.N), "goroutines/op")
		// CPU time per call, client and server together: on a machine
		// whose CPUs are shared, what the throughput is made of.
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}()
	b.ResetTimer()
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := call(int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RPCLedger is the net/rpc twin of testledger.Mem.Add.
type RPCLedger struct {
	mu  sync.Mutex
	bal map[string]int64
}

type RPCAddArgs struct {
	Account string
	Amount  int64
}

func (l *RPCLedger) Add(a *RPCAddArgs, reply *int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bal[a.Account] += a.Amount
	*reply = l.bal[a.Account]
	return nil
}

func startNetRPC(b *testing.B) *rpc.Client {
	srv := rpc.NewServer()
	if err := srv.Register(&RPCLedger{bal: map[string]int64{}}); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	log.SetOutput(io.Discard) // net/rpc logs the listener's close
	b.Cleanup(func() { log.SetOutput(os.Stderr) })
	go srv.Accept(ln)
	c, err := rpc.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); ln.Close() })
	return c
}

// heldEnv is a TCP environment for benchmarks that hold thousands of
// operations open: without a failover budget, which would refuse them.
func heldEnv(b *testing.B) *tcpEnv {
	s := testSettings()
	s.Budget = runtime.BudgetSettings{} // unlimited
	return newTCPEnv(b, s)
}

// BenchmarkInFlightHeartbeats holds 10,000 attempts open on one server and
// measures what heartbeating them costs: frames and bytes per second, CPU
// and allocations per second of wall time. One op is one second.
func BenchmarkInFlightHeartbeats(b *testing.B) {
	e := heldEnv(b)
	const held = 10000
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	release := holdOps(b, e, held)
	defer release()
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	// What one held operation keeps, both ends together: the live heap
	// the collector marks each cycle, and the goroutine stacks it scans.
	heapPerHeld := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / held
	stackPerHeld := float64(int64(after.StackInuse)-int64(before.StackInuse)) / held
	frames := func() (n, bytes uint64) {
		for _, c := range serverConns(e) {
			st := c.Stats()
			n += st.FramesSent
			bytes += st.BytesSent
		}
		return
	}
	var ms0, ms1 goruntime.MemStats
	var ru0, ru1 syscall.Rusage
	f0, by0 := frames()
	goruntime.ReadMemStats(&ms0)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	goruntime.ReadMemStats(&ms1)
	f1, by1 := frames()
	secs := float64(b.N)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(float64(f1-f0)/secs, "hb-frames/s")
	b.ReportMetric(float64(by1-by0)/secs, "hb-bytes/s")
	b.ReportMetric(float64(cpu.Milliseconds()), "cpu-ms/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/secs, "allocs/s")
	b.ReportMetric(heapPerHeld, "heap-B/held")
	b.ReportMetric(stackPerHeld, "stack-B/held")
}

// serverConns finds the servers' side of the client's connections through
// the client's pool connections' peers: each server has one connection to
// the client, so the client's received counts mirror the servers' sent ones.
func serverConns(e *tcpEnv) []conncap.StatsConn {
	var out []conncap.StatsConn
	for _, c := range e.client.Conns() {
		if sc, ok := c.(conncap.StatsConn); ok {
			out = append(out, receivedAsSent{sc})
		}
	}
	return out
}

// receivedAsSent reports a client connection's received counts as the
// server side's sent counts.
type receivedAsSent struct{ conncap.StatsConn }

func (r receivedAsSent) Stats() conncap.Stats {
	st := r.StatsConn.Stats()
	return conncap.Stats{FramesSent: st.FramesReceived, BytesSent: st.BytesReceived}
}

// BenchmarkInvokeTCPBesideHeld is BenchmarkInvokeTCP's 64 callers while
// 10,000 other operations are held open on the servers: what the held
// ones (their heartbeats, their goroutines, their share of every map)
// cost the calls that are not held.
func BenchmarkInvokeTCPBesideHeld(b *testing.B) {
	e := heldEnv(b)
	release := holdOps(b, e, 10000)
	defer release()
	ctx := context.Background()
	runCallers(b, 64, func(i int) error {
		_, err := e.ledger.Add(ctx, accounts[i%len(accounts)], 1)
		return err
	})
	b.StopTimer()
}

// holdOps starts n operations on e whose handlers block until release is
// called, and fails b with the first that fails. They start in steps, as
// load builds up in production (and as bench-compare does): 10,000
// arrivals at once on two cores is another benchmark. release waits for
// the operations to end; defer it, so that it runs before the servers
// close (b.Cleanup), which waits for the handlers, even when b fails.
func holdOps(b *testing.B, e *tcpEnv, n int) (release func()) {
	unblock := make(chan struct{})
	var running atomic.Int64
	for _, l := range e.ledgers {
		l.Lean = true
		l.LeanHold = func(account string) {
			if strings.HasPrefix(account, "held-") {
				running.Add(1)
				<-unblock
			}
		}
	}
	var wg sync.WaitGroup
	release = sync.OnceFunc(func() {
		close(unblock)
		wg.Wait()
	})
	var failed atomic.Int64
	var firstErr atomic.Value
	const step = 500
	for started := 0; started < n; started += step {
		for i := started; i < min(started+step, n); i++ {
			wg.Go(func() {
				if _, err := e.ledger.Add(context.Background(), fmt.Sprintf("held-%d", i), 1); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			})
		}
		testkit.Until(b, "the held operations to start", func() bool {
			if failed.Load() > 0 {
				release()
				b.Fatalf("%d of the held operations failed; the first: %v", failed.Load(), firstErr.Load())
			}
			return running.Load() >= int64(min(started+step, n))
		})
	}
	return release
}
