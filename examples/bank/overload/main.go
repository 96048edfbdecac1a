//go:build unix

// Command overload drives four banknode processes on loopback past their
// capacity (make overload) and reports what an operator needs to trust
// them there: for each run a fresh cluster (a1, a2 in group a; b1, b2 in
// group b) and one bankload. First the capacity, with 16 callers; then 256
// callers and 1024 callers as fast as they go, and 256 callers paced at
// three times the capacity. Per run: operations per second, the latency of
// the admitted calls (p50, p99, max), the calls refused unrun by kind,
// the failovers split into heartbeat timeouts (no node was stopped, so
// each is a node that was only busy) and the rest, the clients'
// suspicions by reason, and the audit of every node with a journal large
// enough to cover the run. The machine's load average stands beside each
// run, and the longest time the host left an idle process without a core
// (stall.go): the figures mean little without them.
//
// The callers share clients as the callers of a fleet share their
// application process's client: four clients by default (-clients), a
// fleet of four application processes, so 1024 callers are four clients
// of 256, each with one connection to each node. A client of its own for each caller would be
// 1024 processes of one caller each, all in the one bankload process: it
// would hold every node at its connection limit and starve itself of the
// CPU to read its own heartbeats, and measure that.
//
// It ends with the targets: no heartbeat-timeout failover and no
// suspicion of a busy node, the p99 of admitted calls within five times
// the unloaded p99, throughput at least 90% of the capacity, and every
// audit passing. It exits 1 when a target is missed, 2 when it could not
// run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
	"github.com/ffgen/ffgen/runtime"
)

// run is one bankload against a fresh cluster.
type run struct {
	name    string
	callers int
	// pace: operations per second as a multiple of the capacity (0:
	// unpaced).
	pace float64
}

var runs = []run{
	{name: "capacity", callers: 16},
	{name: "256", callers: 256},
	{name: "1024", callers: 1024},
	{name: "paced", callers: 256, pace: 3},
}

type config struct {
	duration, capDuration time.Duration
	accounts, reads       int
	clients               int
	limitMin              int
	limitTolerance        float64
	limitBacklog          float64
	queueDelay            time.Duration
	capacity              float64 // ops/s; 0: measure it
	only                  string
	keep                  bool
}

func main() {
	var c config
	flag.DurationVar(&c.duration, "duration", envDuration("FFGEN_OVERLOAD_DURATION", 20*time.Second), "load per overload run ($FFGEN_OVERLOAD_DURATION)")
	flag.DurationVar(&c.capDuration, "capacity-duration", 0, "load of the capacity run (default -duration)")
	flag.IntVar(&c.accounts, "accounts", 100, "accounts")
	flag.IntVar(&c.clients, "clients", 4, "clients the callers of each run share, as the application processes of a fleet (0: a client for each caller's reads, one for the writes)")
	flag.IntVar(&c.limitMin, "limit-min", 4, "with -clients: the least a client's limit to a node falls to (bankload -limit-min)")
	flag.Float64Var(&c.limitTolerance, "limit-tolerance", 2, "with -clients: how many times their long-run average a method's recent answers may take before a client's limit falls (bankload -limit-tolerance)")
	flag.Float64Var(&c.limitBacklog, "limit-backlog", 0.1, "with -clients: the attempts that may wait for a slot of a client's limit, as a multiple of it (bankload -limit-backlog)")
	flag.DurationVar(&c.queueDelay, "queue-delay", runtime.SuggestedQueueDelay, "each node's ServerConfig.QueueDelay (banknode -queue-delay; 0: off)")
	flag.IntVar(&c.reads, "reads", 40, "percentage of operations that are Balance reads")
	flag.Float64Var(&c.capacity, "capacity", 0, "the capacity in ops/s, for the paced run when the capacity run is not among -only")
	flag.StringVar(&c.only, "only", "", "run only these, comma-separated: "+runNames())
	flag.BoolVar(&c.keep, "keep", false, "keep the logs directory")
	flag.Parse()
	if c.capDuration == 0 {
		c.capDuration = c.duration
	}
	os.Exit(overload(c))
}

func envDuration(key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		fmt.Fprintf(os.Stderr, "overload: %s=%q is not a duration; using %v\n", key, v, def)
	}
	return def
}

func runNames() string {
	var names []string
	for _, r := range runs {
		names = append(names, r.name)
	}
	return strings.Join(names, ",")
}

// result is what one run measured.
type result struct {
	run
	rate           int // ops/s asked for; 0: unpaced
	clients        int // the callers share them; 0: a client for each caller's reads
	sum            cli.Summary
	loadBefore     string
	loadAfter      string
	hostStalls     string // what an idle process of the host waited for a core during the run
	cpu            cpuShare
	heartbeatBusy  uint64 // heartbeat-timeout failovers and write legs, every node alive
	nodeRefused    uint64 // attempts the nodes refused for overload; the rest the clients held back unsent
	otherFailovers uint64
	nodesAlive     bool
	err            error
}

func overload(c config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	selected := runs
	if c.only != "" {
		selected = nil
		for _, name := range strings.Split(c.only, ",") {
			i := slices.IndexFunc(runs, func(r run) bool { return r.name == strings.TrimSpace(name) })
			if i < 0 {
				fmt.Fprintf(os.Stderr, "overload: no run %q; the runs are %s\n", name, runNames())
				return 2
			}
			selected = append(selected, runs[i])
		}
	}
	dir, err := os.MkdirTemp("", "bankoverload-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		return 2
	}
	code := 2
	defer func() {
		if c.keep || code != 0 {
			fmt.Printf("overload: logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	fmt.Println("overload: building banknode and bankload")
	if err := testbed.Build(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		return code
	}
	if c.clients > 0 {
		fmt.Printf("overload: the callers of each run share %d clients (a fleet of %d application processes); each client's limit: min %d, tolerance %v, backlog %v; each node's queue delay %v\n",
			c.clients, c.clients, c.limitMin, c.limitTolerance, c.limitBacklog, c.queueDelay)
	} else {
		fmt.Println("overload: each caller reads through a client of its own; the writes share one more")
	}
	var results []*result
	capacity := c.capacity
	for _, r := range selected {
		if ctx.Err() != nil {
			break
		}
		res := &result{run: r}
		d := c.duration
		if r.name == "capacity" {
			d = c.capDuration
		}
		if r.pace > 0 {
			if capacity <= 0 {
				res.err = errors.New("no capacity: run the capacity run first, or give -capacity")
				results = append(results, res)
				continue
			}
			res.rate = int(r.pace * capacity)
		}
		res.err = c.one(ctx, filepath.Join(dir, r.name), d, res)
		if r.name == "capacity" && res.err == nil {
			capacity = res.sum.OpsPerSecond
		}
		printResult(os.Stdout, res)
		results = append(results, res)
	}
	printTable(os.Stdout, results)
	if ctx.Err() != nil {
		return code
	}
	code = 0
	if !targets(os.Stdout, results) {
		code = 1
	}
	return code
}

// one runs r against a fresh cluster in dir for d.
func (c config) one(ctx context.Context, dir string, d time.Duration, res *result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The journal must hold every write of the run, or the audit cannot
	// count lost writes: 40,000 ops/s is well above what one machine does.
	journal := max(1<<17, int(40000*d.Seconds()))
	cl, err := testbed.Start(ctx, testbed.Config{
		BinDir: filepath.Dir(dir), Dir: dir, Out: os.Stdout, Prefix: "overload " + res.name,
		Args: []string{"-journal", strconv.Itoa(journal), "-log-level", "warn", "-queue-delay", c.queueDelay.String()},
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	res.clients = min(c.clients, res.callers)
	cl.Logf("%s, %s for %v: %s", layout(res), rateText(res.rate), d, cl.Describe())
	args := []string{
		"-name", "bankload-" + res.name, "-groups", strings.Join(testbed.Groups, ","),
		"-mgmt", strings.Join(cl.MgmtAddrs(), ","), "-accounts", strconv.Itoa(c.accounts),
		"-callers", strconv.Itoa(res.callers), "-clients", strconv.Itoa(res.clients), "-reads", strconv.Itoa(c.reads),
		"-duration", d.String(), "-rate", strconv.Itoa(res.rate), "-progress", "1s",
		"-audit-timeout", "60s", "-json", filepath.Join(dir, "summary.json"),
	}
	if res.clients > 0 {
		args = append(args, "-limit-min", strconv.Itoa(c.limitMin), "-limit-tolerance", fmt.Sprint(c.limitTolerance),
			"-limit-backlog", fmt.Sprint(c.limitBacklog))
	}
	res.loadBefore = loadAvg()
	stalls := watchStalls()
	// The load starts once bankload has found the nodes, within a second
	// or two; the audit follows it.
	from, to := 3*time.Second, d-time.Second
	if d < 6*time.Second {
		from, to = d/4, 3*d/4
	}
	cmd := cl.Command("bankload", args...)
	out, err := os.Create(filepath.Join(dir, "bankload.out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	cpu := watchCPU(cl.Nodes, cmd.Process, from, to)
	runErr := testbed.Wait(ctx, cmd)
	res.cpu = cpu.end()
	res.loadAfter = loadAvg()
	res.hostStalls = stalls.end()
	res.nodeRefused = nodeRefusals(ctx, cl, dir)
	res.nodesAlive = true
	for _, n := range cl.Nodes {
		res.nodesAlive = res.nodesAlive && n.Running()
	}
	if err := testbed.ReadJSON(filepath.Join(dir, "summary.json"), &res.sum); err != nil {
		return errors.Join(runErr, err)
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return runErr // it did not run; an exit of 1 is a failed audit, reported below
	}
	for _, m := range []map[string]uint64{res.sum.Failovers, res.sum.ScatterLegs} {
		for reason, n := range m {
			switch reason {
			case "heartbeat-timeout":
				res.heartbeatBusy += n
			case "overloaded", "refused":
				// Not a failover: nothing ran, and nothing moved on.
			default:
				res.otherFailovers += n
			}
		}
	}
	return nil
}

// layout says how the run's callers share clients.
func layout(r *result) string {
	if r.clients == 0 {
		return fmt.Sprintf("%d callers, each reading through a client of its own", r.callers)
	}
	return fmt.Sprintf("%d callers sharing %d clients", r.callers, r.clients)
}

func clientsText(r *result) string {
	if r.clients == 0 {
		return "own"
	}
	return strconv.Itoa(r.clients)
}

// nodeRefusals sums the attempts the nodes of cl refused for overload,
// from their /metrics, which it keeps in dir beside the nodes' logs (each
// node's latency by method, its queue delay and its clients' limits, for
// an operator to read where the admitted calls' time went).
func nodeRefusals(ctx context.Context, cl *testbed.Cluster, dir string) uint64 {
	var n uint64
	for _, node := range cl.Nodes {
		if node.TieBreaker {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+node.Mgmt+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := cl.Client().Do(req)
		if err != nil {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		os.WriteFile(filepath.Join(dir, node.Name+".metrics"), body, 0o644)
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "ffgen_server_handled_total{") && strings.Contains(line, `status="refused"`) &&
				strings.Contains(line, `code="ffgen.overloaded"`) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				n += uint64(v)
			}
		}
	}
	return n
}

func rateText(rate int) string {
	if rate == 0 {
		return "unpaced"
	}
	return fmt.Sprintf("paced at %d ops/s", rate)
}

// loadAvg returns the machine's load averages (1, 5 and 15 minutes).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func printResult(w io.Writer, r *result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("-- %s: %s, %s (load average %s before, %s after)", r.name, layout(r), rateText(r.rate), r.loadBefore, r.loadAfter)
	if r.err != nil {
		p("   ERROR: %v", r.err)
		return
	}
	s := &r.sum
	p("   %-22s %.0f (%d in %.1fs); admitted %.0f/s", "ops/s", s.OpsPerSecond, s.Operations, s.Duration, admittedRate(s))
	p("   %-22s p50 %.1fms  p99 %.1fms  max %.1fms  (%d calls)", "admitted latency", s.Admitted.P50, s.Admitted.P99, s.Admitted.Max, s.Admitted.Count)
	for _, m := range slices.Sorted(maps.Keys(s.AdmittedByMethod)) {
		l := s.AdmittedByMethod[m]
		p("   %-22s p50 %.1fms  p99 %.1fms  max %.1fms  (%d calls)", "  "+m, l.P50, l.P99, l.Max, l.Count)
	}
	if w := s.SchedWait; w.Count > 0 {
		p("   %-22s p50 %.2fms  p99 %.1fms  max %.1fms (bankload's goroutines, runnable, waiting for a core)", "generator sched wait", w.P50, w.P99, w.Max)
	}
	p("   %-22s %s (attempts the nodes refused: %d; the rest the clients held back unsent)", "refused, not executed", counts(s.Refusals), r.nodeRefused)
	p("   %-22s %d (every node stayed up: %v)", "hb-timeout failovers", r.heartbeatBusy, r.nodesAlive)
	p("   %-22s reads %s; write legs %s", "other failovers", counts(without(s.Failovers, "heartbeat-timeout")), counts(without(s.ScatterLegs, "heartbeat-timeout")))
	p("   %-22s %s", "suspicions", counts(s.Suspicions))
	p("   %-22s %d failed, %d uncertain, %d overdue", "outcomes", s.Failed, s.Uncertain, s.Overdue)
	p("   %-22s %s (an idle process's timer, woken late by the host)", "host stalls", r.hostStalls)
	p("   %-22s %s", "cpu", r.cpu.text(admittedRate(s)))
	p("   %-22s %s", "audit", auditText(s))
}

// admittedRate is the operations per second that a node took on: the
// throughput that counts, refusals being quick.
func admittedRate(s *cli.Summary) float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Admitted.Count) / s.Duration
}

func without(m map[string]uint64, key string) map[string]uint64 {
	out := maps.Clone(m)
	delete(out, key)
	return out
}

func auditText(s *cli.Summary) string {
	if !s.Audited {
		return "not audited"
	}
	complete := true
	for _, n := range s.Nodes {
		complete = complete && n.Reachable && n.JournalChecked && n.JournalEvicted == 0
	}
	verdict := "FAILED"
	if s.AuditPassed {
		verdict = "passed"
	}
	cover := "journals cover the run"
	if !complete {
		cover = "journals do NOT cover the run"
	}
	return fmt.Sprintf("%s on %d nodes, %d writes, lost %d, applied twice %d, contradicting %d; %s",
		verdict, len(s.Nodes), s.Writes, s.Lost, s.AppliedTwice, s.Contradicting, cover)
}

func printTable(w io.Writer, rs []*result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("%-9s %7s %7s %7s %8s %9s %27s %-22s %8s %8s %-24s %-7s %10s %-31s %s", "run", "callers", "clients", "rate", "ops/s", "admitted/s", "admitted p50 / p99 / max ms", "refused", "hb-busy", "other-fo", "suspicions", "audit", "node µs/op", "load before/after", "host stalls")
	for _, r := range rs {
		if r.err != nil {
			p("%-9s %7d error: %v", r.name, r.callers, r.err)
			continue
		}
		s := &r.sum
		audit := "FAILED"
		if s.AuditPassed {
			audit = "passed"
		}
		p("%-9s %7d %7s %7s %8.0f %9.0f %27s %-22s %8d %8d %-24s %-7s %10.0f %-31s %s", r.name, r.callers, clientsText(r), strconv.Itoa(r.rate), s.OpsPerSecond, admittedRate(s),
			fmt.Sprintf("%.1f / %.1f / %.1f", s.Admitted.P50, s.Admitted.P99, s.Admitted.Max),
			counts(s.Refusals), r.heartbeatBusy, r.otherFailovers, counts(s.Suspicions), audit, r.cpu.perOp(admittedRate(s)), r.loadBefore+" / "+r.loadAfter, r.hostStalls)
	}
}

// targets prints the targets against the runs and reports
// whether all of them hold.
func targets(w io.Writer, rs []*result) bool {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	var base *result
	for _, r := range rs {
		if r.name == "capacity" && r.err == nil {
			base = r
		}
	}
	ok := true
	check := func(cond bool, format string, args ...any) {
		mark := "ok  "
		if !cond {
			mark, ok = "MISS", false
		}
		p("  %s %s", mark, fmt.Sprintf(format, args...))
	}
	p("")
	p("targets:")
	for _, r := range rs {
		if r.err != nil {
			check(false, "%s: did not run: %v", r.name, r.err)
			continue
		}
		s := &r.sum
		check(r.heartbeatBusy == 0, "%s: %d heartbeat-timeout failovers of nodes that were only busy", r.name, r.heartbeatBusy)
		check(s.Suspicions["dial-failed"] == 0, "%s: %d suspicions from dial-failed (the connection cap)", r.name, s.Suspicions["dial-failed"])
		check(s.Failed == s.Refusals["overloaded"] || s.Failed == 0, "%s: every failed call a typed refusal, not executed (%d failed, %d refused for overload)", r.name, s.Failed, s.Refusals["overloaded"])
		check(s.AuditPassed, "%s: audit %s", r.name, auditText(s))
		check(len(r.cpu.bound) == 0, "%s: every process of the run free to use every CPU (bound: %s)", r.name, orNone(r.cpu.bound))
		if base != nil && r != base {
			check(s.Admitted.P99 <= 5*base.sum.Admitted.P99, "%s: admitted p99 %.1fms within 5x the unloaded p99 (%.1fms)", r.name, s.Admitted.P99, 5*base.sum.Admitted.P99)
			check(admittedRate(s) >= 0.9*base.sum.OpsPerSecond, "%s: %.0f admitted ops/s at least 90%% of the capacity (%.0f)", r.name, admittedRate(s), 0.9*base.sum.OpsPerSecond)
		}
	}
	return ok
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func counts(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
