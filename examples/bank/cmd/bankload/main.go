// Command bankload drives a bank cluster with concurrent callers, prints a
// progress line every second and a summary at the end, and audits every
// node: each balance must equal what the acknowledged operations imply.
// It exits 1 when the audit fails or a caller waited past the operation
// deadline, 2 when it cannot start.
//
// It is a thin client: it follows the membership the nodes' management
// endpoints report (cluster.Follow) without joining gossip, so it needs no
// gossip port or failure group and no node lists it. Writes share one
// client, so that every node receives them in the same order; each caller
// reads through a client of its own, so a failover is attributed to the
// read that paid for it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
)

const usage = `Runs load against a bank cluster and audits every node's balances.
`

// deadlineMargin is how far past the operation timeout a caller may wait
// before the run counts it as overdue: scheduling on a busy machine.
const deadlineMargin = time.Second

type config struct {
	name, groups, mgmt, token                     string
	logLevel, jsonPath                            string
	tlsCA, tlsCert, tlsKey                        string
	accounts, callers, ops, readPct, rate         int
	initial                                       int
	duration, progress, auditTimeout, joinTimeout time.Duration
}

func main() {
	f := cli.NewFlags("bankload", usage)
	var (
		name     = f.String("name", "", "bankload-"+strconv.Itoa(os.Getpid()), "name of this load generator in the nodes' logs")
		groups   = f.String("groups", runtime.EnvGroups, "", "every failure group, comma-separated, as the nodes list them (required)")
		mgmt     = f.String("mgmt", "FFGEN_MANAGEMENT_ADDRS", "", "management addresses of the nodes, comma-separated: host:port, dns+name:port or dnssrv+name; the membership is read from them and they are audited (required)")
		token    = f.String("manage-token", cli.ManageTokenEnv, "", "bearer token of the nodes' management endpoints, if they require one")
		logLevel = f.String("log-level", "FFGEN_LOG_LEVEL", "warn", "runtime log level: debug, info, warn or error")
		tlsCA    = f.String("rpc-tls-ca", "FFGEN_RPC_TLS_CA", "", "PEM CA of the nodes' certificates: connect with TLS 1.3")
		tlsCert  = f.String("rpc-tls-cert", "FFGEN_RPC_TLS_CLIENT_CERT", "", "PEM client certificate, for nodes that require one")
		tlsKey   = f.String("rpc-tls-key", "FFGEN_RPC_TLS_CLIENT_KEY", "", "PEM private key of -rpc-tls-cert")
		jsonPath = f.String("json", "", "", "also write the summary as JSON to this file")
		accounts = f.Int("accounts", "", 100, "accounts to open and use")
		callers  = f.Int("callers", "", 16, "concurrent callers")
		ops      = f.Int("ops", "", 0, "stop after this many operations (0: run for -duration)")
		readPct  = f.Int("reads", "", 40, "percentage of operations that are Balance reads")
		rate     = f.Int("rate", "", 0, "operations per second, all callers together (0: as fast as they go)")
		initial  = f.Int("initial", "", 5000, "opening balance of each account, in cents")
		duration = f.Duration("duration", "", 20*time.Second, "how long to run when -ops is 0")
		progress = f.Duration("progress", "", time.Second, "interval between progress lines (0: none)")
		auditTO  = f.Duration("audit-timeout", "", 15*time.Second, "how long the audit waits for nodes to converge")
		joinTO   = f.Duration("join-timeout", "", 15*time.Second, "how long to wait for a member of every group")
	)
	f.Parse(os.Args[1:])
	c := config{
		name: *name, groups: *groups, mgmt: *mgmt, token: *token, logLevel: *logLevel, jsonPath: *jsonPath, tlsCA: *tlsCA, tlsCert: *tlsCert, tlsKey: *tlsKey,
		accounts: *accounts, callers: *callers, ops: *ops, readPct: *readPct, rate: *rate, initial: *initial,
		duration: *duration, progress: *progress, auditTimeout: *auditTO, joinTimeout: *joinTO,
	}
	ctx, stop, log := f.Start(c.logLevel)
	defer stop()
	os.Exit(run(ctx, c, log))
}

// run returns the exit code.
func run(ctx context.Context, c config, log *slog.Logger) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bankload:", err)
		return 2
	}
	if c.mgmt == "" {
		return fail(errors.New("-mgmt is required"))
	}
	if c.accounts < 2 || c.callers < 1 || c.readPct < 0 || c.readPct > 100 || c.initial < 0 || c.rate < 0 {
		return fail(errors.New("want -accounts >= 2, -callers >= 1, 0 <= -reads <= 100, -initial >= 0, -rate >= 0"))
	}
	settings, err := runtime.SettingsFromEnv(runtime.DefaultSettings())
	if err != nil {
		return fail(err)
	}
	if c.groups != "" {
		settings.Groups = cli.List(c.groups)
	}
	if err := settings.Validate(); err != nil {
		return fail(err)
	}

	members, err := follow(ctx, c, settings.Groups, log)
	if err != nil {
		return fail(err)
	}
	defer members.Close()

	rtLog := slog.New(newOnceHandler(log.Handler()))
	clientTLS, err := cli.ClientTLS(c.tlsCA, c.tlsCert, c.tlsKey)
	if err != nil {
		return fail(err)
	}
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: c.name, Logger: rtLog}, ClientTLS: clientTLS})
	if err != nil {
		return fail(err)
	}
	newClient := func(m runtime.Metrics) (*runtime.Client, error) {
		return runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: members, Settings: settings, Metrics: m, Logger: rtLog})
	}
	writeProbe := newProbe()
	wc, err := newClient(writeProbe)
	if err != nil {
		return fail(err)
	}
	defer wc.Close()
	writes := bank.NewAccountsClient(wc)

	run := runID()
	ids := make([]string, c.accounts)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", run, i)
	}
	if err := openAll(ctx, writes, ids, int64(c.initial), c.callers); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "bankload: run %s: %d accounts open, %d callers, groups %v\n", run, len(ids), c.callers, settings.Groups)

	model := newModel(ids, int64(c.initial))
	lv := &live{}
	callers := make([]*caller, c.callers)
	for i := range callers {
		p := newProbe()
		rc, err := newClient(p)
		if err != nil {
			return fail(err)
		}
		defer rc.Close()
		callers[i] = &caller{
			accounts: ids, writes: writes, reads: bank.NewAccountsClient(rc), probe: p,
			model: model, live: lv, t: newTally(), rng: mrand.New(mrand.NewPCG(uint64(i), mrand.Uint64())),
			maxWait: settings.OperationTimeout + deadlineMargin, readPct: c.readPct,
		}
	}

	loadCtx := ctx
	if c.ops == 0 {
		var cancel context.CancelFunc
		loadCtx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	start := time.Now()
	next := pacer(loadCtx, start, c.ops, c.rate)
	stopProgress := startProgress(c.progress, lv, start)
	var wg sync.WaitGroup
	for _, cr := range callers {
		wg.Go(func() { cr.run(next) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	tallies := make([]*tally, len(callers))
	for i, cr := range callers {
		tallies[i] = cr.t
	}
	sum := summarize(run, elapsed, tallies, settings)
	for r, n := range writeProbe.ends() {
		if r != runtime.ReasonNone {
			sum.ScatterLegs[r.String()] += n
		}
	}
	fmt.Fprintf(os.Stderr, "bankload: load done; auditing %s\n", c.mgmt)
	auditAddrs, err := cluster.Resolve(ctx, nil, cli.List(c.mgmt))
	if err != nil {
		// Audit what resolved; a node that did not is as good as killed.
		fmt.Fprintln(os.Stderr, "bankload: audit:", err)
	}
	sum.Nodes, sum.AuditPassed = audit(context.WithoutCancel(ctx), cli.ManagementClient(2*time.Second, c.token), model, auditAddrs, run+"-", c.auditTimeout)
	printSummary(os.Stdout, sum)
	if c.jsonPath != "" {
		if err := writeJSON(c.jsonPath, sum); err != nil {
			return fail(err)
		}
	}
	if !sum.AuditPassed || sum.Overdue > 0 {
		return 1
	}
	return 0
}

// pacer returns the callers' gate: it admits operations until ops have
// started (ops > 0) or ctx ends, at most rate per second (rate > 0).
func pacer(ctx context.Context, start time.Time, ops, rate int) func() bool {
	var started atomic.Int64
	return func() bool {
		n := started.Add(1)
		if ops > 0 && n > int64(ops) {
			return false
		}
		if rate > 0 {
			due := start.Add(time.Duration(float64(n-1) / float64(rate) * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				defer t.Stop()
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		}
		return ctx.Err() == nil
	}
}

// follow reads the membership from the nodes' management endpoints and
// waits until every group has a member serving the bank.
func follow(ctx context.Context, c config, groups []string, log *slog.Logger) (*cluster.Follower, error) {
	f, err := cluster.Follow(cluster.FollowConfig{Nodes: cli.List(c.mgmt), Token: c.token, Logger: log})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, c.joinTimeout)
	defer cancel()
	if err := f.Wait(wctx, bank.AccountsDesc.Name, groups); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openAll opens the accounts with n callers. Load has not started, so
// every Open must succeed.
func openAll(ctx context.Context, a *bank.AccountsClient, ids []string, initial int64, n int) error {
	work := make(chan string)
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for id := range work {
				if _, err := a.Open(ctx, bank.OpenRequest{AccountID: id, Initial: initial}); err != nil {
					errs <- fmt.Errorf("open %s: %w", id, err)
				}
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs // nil when closed and empty
}

// runID names this run; account IDs start with it, so runs never collide.
func runID() string {
	var b [3]byte
	rand.Read(b[:])
	return "r" + hex.EncodeToString(b[:])
}

// startProgress prints a line every interval until the returned stop.
func startProgress(every time.Duration, lv *live, start time.Time) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		var lastOps uint64
		last := start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				ops := lv.ops.Load()
				rate := float64(ops-lastOps) / now.Sub(last).Seconds()
				lastOps, last = ops, now
				fmt.Fprintf(os.Stderr, "%5.0fs  ops %8d  %7.0f/s  errors %5d  timeouts %3d  failovers %4d  slowest %6.1fms\n",
					now.Sub(start).Seconds(), ops, rate, lv.errs.Load(), lv.timeouts.Load(), lv.failovers.Load(),
					ms(time.Duration(lv.maxNs.Swap(0))))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
