// Command bankload drives a bank cluster with concurrent callers, prints a
// progress line every second and a summary at the end, and audits every
// node: each balance must equal what the acknowledged operations imply, and
// each node's journal must hold every acknowledged write once, with the
// outcome the writer was told. It exits 1 when the audit fails or a caller
// waited past the operation deadline, 2 when it cannot start.
//
// It is a thin client: it follows the membership the nodes' management
// endpoints report (cluster.Follow) without joining gossip, so it needs no
// gossip port or failure group and no node lists it. By default writes
// share one client, and each caller reads through a client of its own, so
// that a failover is attributed to the read that paid for it. With
// -clients N the callers share N clients instead, each caller reading and
// writing through one of them, as callers share the client of their
// application process in a fleet of N: 1024 callers each with clients of
// their own would be 1024 processes, each with a connection to every node,
// and one process driving them all starves itself.
//
// Several bankload processes can write to the same accounts: one opens them
// (-run R -duration 0 -writes open.json), the others write without opening
// (-run R -open=false -audit=false -writes wN.json), and a last one audits
// every node against all their logs (-audit-only open.json,w1.json,...).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bank "github.com/ffgen/ffgen/examples/bank/internal/accounts"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/examples/bank/internal/history"
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
	name, groups, mgmt, token                      string
	logLevel, jsonPath                             string
	tlsCA, tlsCert, tlsKey                         string
	run, writesPath, auditOnly, historyPath        string
	checkHistory                                   string
	transferGroup, limitMin                        int
	limitTolerance, limitBacklog                   float64
	checkTimeout                                   time.Duration
	open, audit, requireAll                        bool
	accounts, callers, clients, ops, readPct, rate int
	initial                                        int
	duration, progress, auditTimeout, joinTimeout  time.Duration
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
		clients  = f.Int("clients", "", 0, "clients the callers share, each caller reading and writing through one, as the application processes of a fleet (0: one shared client for writes and one for each caller's reads)")
		ops      = f.Int("ops", "", 0, "stop after this many operations (0: run for -duration)")
		readPct  = f.Int("reads", "", 40, "percentage of operations that are Balance reads")
		limMin   = f.Int("limit-min", "", 0, "the least a client's limit to a node may fall to (runtime.LimitConfig.Min; 0: its default)")
		limTol   = f.FlagSet.Float64("limit-tolerance", 0, "how many times their long-run average a method's recent answers from a node may take before the client's limit to it falls (runtime.LimitConfig.Tolerance; 0: refusals and timeouts alone)")
		limBack  = f.FlagSet.Float64("limit-backlog", 0, "attempts that may wait for a slot of a client's limit, as a multiple of it; past them a call is refused at once (runtime.LimitConfig.Backlog; 0: any number wait)")
		rate     = f.Int("rate", "", 0, "operations per second, all callers together (0: as fast as they go)")
		initial  = f.Int("initial", "", 5000, "opening balance of each account, in cents")
		duration = f.Duration("duration", "", 20*time.Second, "how long to run when -ops is 0")
		progress = f.Duration("progress", "", time.Second, "interval between progress lines (0: none)")
		auditTO  = f.Duration("audit-timeout", "", 15*time.Second, "how long the audit waits for nodes to converge")
		joinTO   = f.Duration("join-timeout", "", 15*time.Second, "how long to wait for a member of every group")
		runFlag  = f.String("run", "", "", "run ID: account IDs start with it; writers of one run share it (default: random)")
		writes   = f.String("writes", "", "", "write this writer's log (every write, its ID and outcome) to this file, for -audit-only")
		hist     = f.String("history", "", "", "write the history (every operation, reads too: its times, arguments and outcome) to this file as JSON lines; with -audit, check it for linearizability")
		checkH   = f.String("check-history", "", "", "no load: check these histories, comma-separated, for linearizability (accounts they do not open hold -initial)")
		checkTO  = f.Duration("check-timeout", "", history.DefaultTimeout, "how long the linearizability check may take before it answers unknown")
		tgroup   = f.Int("transfer-group", "", 2, "transfers stay within groups of this many consecutive accounts, so that the history splits into parts small enough to check (0: any two accounts)")
		only     = f.String("audit-only", "", "", "no load: audit every node against these writer logs, comma-separated")
		open     = f.FlagSet.Bool("open", true, "open the accounts first; false: another writer of -run opened them")
		doAudit  = f.FlagSet.Bool("audit", true, "audit every node after the load")
		all      = f.FlagSet.Bool("require-all", false, "fail the audit when a node does not answer, instead of skipping it")
	)
	f.Parse(os.Args[1:])
	c := config{
		name: *name, groups: *groups, mgmt: *mgmt, token: *token, logLevel: *logLevel, jsonPath: *jsonPath, tlsCA: *tlsCA, tlsCert: *tlsCert, tlsKey: *tlsKey,
		accounts: *accounts, callers: *callers, clients: *clients, ops: *ops, readPct: *readPct, rate: *rate, initial: *initial, limitMin: *limMin, limitTolerance: *limTol, limitBacklog: *limBack,
		duration: *duration, progress: *progress, auditTimeout: *auditTO, joinTimeout: *joinTO,
		run: *runFlag, writesPath: *writes, historyPath: *hist, checkHistory: *checkH, checkTimeout: *checkTO, transferGroup: *tgroup, auditOnly: *only, open: *open, audit: *doAudit, requireAll: *all,
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
	if c.auditOnly != "" {
		return auditOnly(ctx, c)
	}
	if c.checkHistory != "" {
		return checkOnly(c)
	}
	if c.mgmt == "" {
		return fail(errors.New("-mgmt is required"))
	}
	if c.accounts < 2 || c.callers < 1 || c.clients < 0 || c.readPct < 0 || c.readPct > 100 || c.initial < 0 || c.initial > math.MaxInt32 || c.rate < 0 || c.transferGroup < 0 || c.transferGroup == 1 {
		return fail(errors.New("want -accounts >= 2, -callers >= 1, -clients >= 0, 0 <= -reads <= 100, 0 <= -initial <= 2147483647, -rate >= 0, -transfer-group 0 or >= 2"))
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

	suspicions := newSuspicionCounter(newOnceHandler(log.Handler()))
	rtLog := slog.New(suspicions)
	clientTLS, err := cli.ClientTLS(c.tlsCA, c.tlsCert, c.tlsKey)
	if err != nil {
		return fail(err)
	}
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: c.name, Logger: rtLog}, ClientTLS: clientTLS})
	if err != nil {
		return fail(err)
	}
	// Backs off to what the nodes take (runtime.LimitConfig).
	limit := runtime.LimitConfig{Enabled: true, Min: c.limitMin, Tolerance: c.limitTolerance, Backlog: c.limitBacklog}
	newClient := func(m runtime.Metrics) (*runtime.Client, error) {
		return runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: members, Settings: settings, Metrics: m, Logger: rtLog,
			Limit: limit})
	}
	lv := &live{}
	var probes []*probe
	newProbedClient := func() (*runtime.Client, error) {
		p := newProbe(lv)
		probes = append(probes, p)
		return newClient(p)
	}
	wc, err := newProbedClient()
	if err != nil {
		return fail(err)
	}
	defer wc.Close()
	writes := bank.NewAccountsClient(wc)

	run := c.run
	if run == "" {
		run = runID()
	}
	ids := accountIDs(run, c.accounts)
	wlog := &writeLog{Run: run, Writer: c.name, Accounts: c.accounts, Initial: int64(c.initial)}
	var hist *history.Recorder
	if c.historyPath != "" {
		if hist, err = history.Create(c.historyPath, c.name); err != nil {
			return fail(err)
		}
		defer hist.Close()
	}
	if c.open {
		if err := openAll(ctx, writes, wlog, hist, ids, int64(c.initial), c.callers); err != nil {
			return fail(err)
		}
	}
	fmt.Fprintf(os.Stderr, "bankload: run %s: %d accounts, %d callers, groups %v\n", run, len(ids), c.callers, settings.Groups)

	// shared are the clients of -clients; the first is the one that
	// opened the accounts.
	shared := []*runtime.Client{wc}
	for len(shared) < c.clients {
		cl, err := newProbedClient()
		if err != nil {
			return fail(err)
		}
		defer cl.Close()
		shared = append(shared, cl)
	}
	callers := make([]*caller, c.callers)
	for i := range callers {
		cr := &caller{
			accounts: ids, writes: writes,
			log: wlog, hist: hist, client: i, live: lv, t: newTally(), rng: mrand.New(mrand.NewPCG(uint64(i), mrand.Uint64())),
			maxWait: settings.OperationTimeout + deadlineMargin, readPct: c.readPct, group: c.transferGroup,
		}
		if c.clients > 0 {
			cl := bank.NewAccountsClient(shared[i%len(shared)])
			cr.reads, cr.writes = cl, cl
		} else {
			rc, err := newProbedClient()
			if err != nil {
				return fail(err)
			}
			defer rc.Close()
			cr.reads, cr.probe, cr.ownReads = bank.NewAccountsClient(rc), probes[len(probes)-1], true
		}
		callers[i] = cr
	}

	loadCtx := ctx
	if c.ops == 0 {
		var cancel context.CancelFunc
		loadCtx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	sched := schedSnapshot()
	start := time.Now()
	next := pacer(loadCtx, start, c.ops, c.rate)
	stopProgress := startProgress(c.progress, lv, start)
	var wg sync.WaitGroup
	for _, cr := range callers {
		wg.Go(func() { cr.run(next) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	schedAfter := schedSnapshot()
	stopProgress()
	if c.clients > 0 {
		fmt.Fprintf(os.Stderr, "bankload: limits at the end: %s\n", limitsText(shared))
	}

	tallies := make([]*tally, len(callers))
	for i, cr := range callers {
		tallies[i] = cr.t
	}
	sum := summarize(run, elapsed, tallies, settings)
	sum.Clients = c.clients
	sum.SchedWait = schedWait(sched, schedAfter)
	for _, p := range probes {
		reads, writes := p.counts()
		for r, n := range reads {
			sum.Failovers[r.String()] += n
		}
		for r, n := range writes {
			if r != runtime.ReasonNone {
				sum.ScatterLegs[r.String()] += n
			}
		}
	}
	sum.Writes = len(wlog.Writes)
	sum.Suspicions = suspicions.counts()
	if c.writesPath != "" {
		if err := wlog.save(c.writesPath); err != nil {
			return fail(err)
		}
	}
	if hist != nil {
		hc := hist.Counts()
		sum.History, sum.Indeterminate = c.historyPath, hc.Indeterminate
		if err := hist.Close(); err != nil {
			return fail(fmt.Errorf("history: %w", err))
		}
	}
	if c.audit {
		fmt.Fprintf(os.Stderr, "bankload: load done; auditing %s\n", c.mgmt)
		model, all := merge([]*writeLog{wlog})
		runAudit(ctx, c, sum, model, all, run)
		if hist != nil {
			fmt.Fprintf(os.Stderr, "bankload: checking the history for linearizability\n")
			if err := checkHistories(c, sum, c.historyPath); err != nil {
				return fail(err)
			}
		}
	}
	printSummary(os.Stdout, sum)
	if c.jsonPath != "" {
		if err := writeJSON(c.jsonPath, sum); err != nil {
			return fail(err)
		}
	}
	if (c.audit && !sum.AuditPassed) || sum.Overdue > 0 || sum.Linearizable == string(history.No) {
		return 1
	}
	return 0
}

// checkHistories checks the histories at paths for linearizability into
// sum. Accounts they do not open are taken to hold -initial at the start.
func checkHistories(c config, sum *cli.Summary, paths ...string) error {
	ops, err := history.ReadFiles(paths...)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	r := history.Check(ops, history.Options{Initial: int64(c.initial), Timeout: c.checkTimeout})
	sum.Linearizable, sum.LinearizableDetail = string(r.Verdict), r.String()
	sum.HistoryCheck = fmt.Sprintf("%d operations (%d checked, %d indeterminate) in %d independent parts, the largest of %d, in %.1fs",
		r.Ops, r.Checked, r.Indeterminate, r.Parts, r.Largest, r.Took.Seconds())
	return nil
}

// checkOnly checks the histories of -check-history; exit 1 when they are
// not linearizable.
func checkOnly(c config) int {
	sum := &cli.Summary{}
	if err := checkHistories(c, sum, cli.List(c.checkHistory)...); err != nil {
		fmt.Fprintln(os.Stderr, "bankload: -check-history:", err)
		return 2
	}
	printCheck(os.Stdout, sum)
	if c.jsonPath != "" {
		if err := writeJSON(c.jsonPath, sum); err != nil {
			fmt.Fprintln(os.Stderr, "bankload:", err)
			return 2
		}
	}
	if sum.Linearizable == string(history.No) {
		return 1
	}
	return 0
}

// auditOnly audits every node against the writer logs of -audit-only.
func auditOnly(ctx context.Context, c config) int {
	if c.mgmt == "" {
		fmt.Fprintln(os.Stderr, "bankload: -audit-only needs -mgmt")
		return 2
	}
	logs, err := loadLogs(cli.List(c.auditOnly))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bankload: -audit-only:", err)
		return 2
	}
	model, all := merge(logs)
	sum := &cli.Summary{Run: logs[0].Run, Writers: len(logs), Writes: len(all)}
	for _, w := range all {
		if w.Outcome == unknown {
			sum.Uncertain++
		}
	}
	runAudit(ctx, c, sum, model, all, logs[0].Run)
	fmt.Fprintf(os.Stdout, "\n== bankload audit of run %s ==\n", sum.Run)
	printAudit(os.Stdout, sum)
	if c.jsonPath != "" {
		if err := writeJSON(c.jsonPath, sum); err != nil {
			fmt.Fprintln(os.Stderr, "bankload:", err)
			return 2
		}
	}
	if !sum.AuditPassed {
		return 1
	}
	return 0
}

// runAudit audits every -mgmt node against the writes into sum.
func runAudit(ctx context.Context, c config, sum *cli.Summary, model *ledgerModel, writes []writeRecord, run string) {
	addrs, err := cluster.Resolve(ctx, nil, cli.List(c.mgmt))
	if err != nil {
		// Audit what resolved; a node that did not is as good as killed.
		fmt.Fprintln(os.Stderr, "bankload: audit:", err)
	}
	res := audit(context.WithoutCancel(ctx), cli.ManagementClient(5*time.Second, c.token), auditSpec{
		model: model, writes: writes, addrs: addrs, prefix: run + "-",
		timeout: c.auditTimeout, requireAll: c.requireAll,
	})
	sum.Audited = true
	sum.Nodes, sum.AuditPassed = res.nodes, res.passed
	sum.Lost, sum.AppliedTwice, sum.Contradicting = res.lost, res.twice, res.contradicting
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

// openAll opens the accounts with n callers, each Open under an ID of its
// own, recorded in log and hist. Load has not started, so every Open must
// succeed; one a node refused for overload ran nowhere, and is sent again
// under its ID after the node's hint.
func openAll(ctx context.Context, a *bank.AccountsClient, log *writeLog, hist *history.Recorder, ids []string, initial int64, n int) error {
	work := make(chan string)
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for id := range work {
				op := newOpID()
				h := history.Op{Client: i, ID: hex.EncodeToString(op[:]), Kind: history.Open, Accounts: []string{id}, Amount: initial, Invoke: history.Now()}
				b, err := a.Open(runtime.WithOperationID(ctx, op), bank.OpenRequest{AccountID: id, Initial: bank.Cents(initial)})
				for d, ok := runtime.RetryAfter(err); ok && errors.Is(err, runtime.ErrOverloaded) && !runtime.MaybeExecuted(err); d, ok = runtime.RetryAfter(err) {
					time.Sleep(d)
					b, err = a.Open(runtime.WithOperationID(ctx, op), bank.OpenRequest{AccountID: id, Initial: bank.Cents(initial)})
				}
				h.Return = history.Now()
				h.Outcome, h.Balance, h.Error = historyOutcome(b, err)
				hist.Record(h)
				log.add(op, "Open", b.Amount, err)
				if err != nil {
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
				fmt.Fprintf(os.Stderr, "%5.0fs  ops %8d  %7.0f/s  declared errors %5d  failed %4d  timeouts %3d  failovers %4d  slowest %6.1fms\n",
					now.Sub(start).Seconds(), ops, rate, lv.declared.Load(), lv.failed.Load(), lv.timeouts.Load(), lv.failovers.Load(),
					ms(time.Duration(lv.maxNs.Swap(0))))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// limitsText sums the limits of clients to each node: what the fleet of
// clients learned that the node takes.
func limitsText(clients []*runtime.Client) string {
	type sum struct {
		limit, inflight, waiting, n, least, most int
		drops                                    runtime.LimitDecreases
	}
	by := map[string]*sum{}
	for _, cl := range clients {
		for _, l := range cl.Limits() {
			s := by[l.Node]
			if s == nil {
				s = &sum{least: l.Limit, most: l.Limit}
				by[l.Node] = s
			}
			s.limit, s.inflight, s.waiting, s.n = s.limit+l.Limit, s.inflight+l.InFlight, s.waiting+l.Waiting, s.n+1
			s.least, s.most = min(s.least, l.Limit), max(s.most, l.Limit)
			s.drops.Refused += l.Decreases.Refused
			s.drops.TimedOut += l.Decreases.TimedOut
			s.drops.Slow += l.Decreases.Slow
		}
	}
	var parts []string
	for _, node := range slices.Sorted(maps.Keys(by)) {
		s := by[node]
		parts = append(parts, fmt.Sprintf("%s %d over %d clients (each %d-%d; decreases: %d refused, %d timeout, %d slow)",
			node, s.limit, s.n, s.least, s.most, s.drops.Refused, s.drops.TimedOut, s.drops.Slow))
	}
	return strings.Join(parts, "; ")
}
