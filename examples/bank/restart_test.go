package bank_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// envInt reads a size from the environment, for the large runs of
// `make restart-time`.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// A bank node killed and started again on its data directory, and then
// the whole cluster killed at once and started again, hold every account
// and balance acknowledged before, and answer a retried write with its
// recorded result.
// With FFGEN_RESTART_ACCOUNTS and FFGEN_RESTART_WRITES (make restart-time)
// it is the measurement of a restart from disk: the log it reports how
// long the node took to be ready, with what on disk. No timing is
// asserted.
func TestLedgerRestartsFromDisk(t *testing.T) {
	accounts := envInt(t, "FFGEN_RESTART_ACCOUNTS", 500)
	writes := envInt(t, "FFGEN_RESTART_WRITES", 3000)
	callers := 64
	snapshotEvery := 0 // the default
	if os.Getenv("FFGEN_RESTART_SNAPSHOT_EVERY") != "" {
		snapshotEvery = envInt(t, "FFGEN_RESTART_SNAPSHOT_EVERY", 0)
	}
	dir := t.TempDir()
	cfg := fftest.Config{Server: func(node string, sc *runtime.ServerConfig) {
		sc.DataDir = filepath.Join(dir, node)
		// The data is made without waiting for the disk, to make a big
		// log quickly; the restart reads it the same way either way.
		sc.Replication.UnsafeNoFsync = os.Getenv("FFGEN_RESTART_ACCOUNTS") != ""
		// FFGEN_RESTART_SNAPSHOT_EVERY above the writes keeps every write
		// in the log, which the restart then replays whole.
		sc.Replication.SnapshotEvery = snapshotEvery
	}}
	c := fftest.New(t, cfg)
	var mu sync.Mutex
	ledgers := map[string]*bank.Ledger{}
	c.Serve(t, bank.AccountsDesc, func(n *fftest.Node) any {
		mu.Lock()
		defer mu.Unlock()
		ledgers[n.Name] = bank.NewLedger(0)
		return ledgers[n.Name]
	})
	balances := func(node string) map[string]int64 {
		mu.Lock()
		defer mu.Unlock()
		return ledgers[node].Snapshot("").Balances
	}
	c.WaitReady(t)
	accts := bank.NewAccountsClient(c.Client(t))
	ctx := t.Context()
	start := time.Now()
	// A write that fails (a busy machine can cost the leader its
	// quorum for a moment) is retried with its operation ID, as a caller
	// must: it applies once either way.
	parallel(t, callers, accounts, func(i int) error {
		return retried(ctx, func(ctx context.Context) error {
			_, err := accts.Open(ctx, bank.OpenRequest{AccountID: fmt.Sprintf("acct-%d", i), Initial: 1000})
			return err
		})
	})
	parallel(t, callers, writes, func(i int) error {
		return retried(ctx, func(ctx context.Context) error {
			_, err := accts.Deposit(ctx, bank.DepositRequest{AccountID: fmt.Sprintf("acct-%d", i%accounts), Amount: 1})
			return err
		})
	})
	id := [16]byte{0xba, 0x4c}
	first, err := accts.Deposit(runtime.WithOperationID(ctx, id), bank.DepositRequest{AccountID: "acct-0", Amount: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("made %d accounts and %d writes in %v", accounts, writes+1, time.Since(start).Round(time.Millisecond))
	c.WaitConverged(t)
	want := maps.Clone(balances("a1"))

	// A restarted node has stored the commit index only as far as its
	// last store took it (commit-only changes ride with the next one), so
	// the entries after it apply once the new leader commits its term's
	// first entry, which may come after the replicas look converged: the
	// balances are waited for, with a bound a lost write never meets.
	check := func(when string) {
		t.Helper()
		for _, node := range []string{"a1", "b1"} {
			var got map[string]int64
			if !testkit.Within(30*time.Second, func() bool { got = balances(node); return maps.Equal(got, want) }) {
				t.Fatalf("%s: balances %s differ from before it (%d accounts, %d before)", node, when, len(got), len(want))
			}
		}
	}

	// One node: the other leads meanwhile.
	c.Kill(t, "a1")
	size := dirSize(t, filepath.Join(dir, "a1"))
	begin := time.Now()
	c.Start(t, "a1")
	c.WaitReady(t)
	took := time.Since(begin)
	st := c.Node("a1").Server.Replication()[0]
	t.Logf("a1 restarted from disk (%d MiB; snapshot at %d, log %d..%d) and ready in %v",
		size>>20, st.SnapshotIndex, st.LogFirst, st.LogLast, took.Round(time.Millisecond))
	c.WaitConverged(t)
	check("after a1's restart")

	// Both at once, as after a power cut.
	c.Kill(t, "a1")
	c.Kill(t, "b1")
	begin = time.Now()
	var wg sync.WaitGroup
	for _, node := range []string{"a1", "b1"} {
		wg.Go(func() { c.Start(t, node) })
	}
	wg.Wait()
	c.WaitReady(t)
	t.Logf("both nodes restarted from disk at once and ready in %v", time.Since(begin).Round(time.Millisecond))
	c.WaitConverged(t)
	check("after both restarted")
	accts = bank.NewAccountsClient(c.Client(t))
	again, err := accts.Deposit(runtime.WithOperationID(ctx, id), bank.DepositRequest{AccountID: "acct-0", Amount: 7})
	if err != nil || again != first {
		t.Errorf("retried deposit after the restart = %+v, %v; want the recorded %+v", again, err, first)
	}
}

// retried runs call with one operation ID until it succeeds, a few times
// at most; a refusal for overload, which ran nothing, is retried after
// the node's hint, as a caller must, many more times: 64 callers loading
// a node whose log waits for the disk make a queue it sheds.
func retried(ctx context.Context, call func(context.Context) error) error {
	var id [16]byte
	rand.Read(id[:])
	ctx = runtime.WithOperationID(ctx, id)
	var err error
	for failed, refused := 0, 0; failed < 5 && refused < 100; {
		if err = call(ctx); err == nil {
			return nil
		}
		if d, ok := runtime.RetryAfter(err); ok {
			refused++
			time.Sleep(d)
			continue
		}
		failed++
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// parallel runs n calls of f over callers goroutines, failing t on the
// first error.
func parallel(t *testing.T, callers, n int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- fmt.Errorf("call %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func dirSize(t *testing.T, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
