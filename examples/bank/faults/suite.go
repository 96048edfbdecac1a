//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/examples/bank/internal/history"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
	"github.com/ffgen/ffgen/runtime"
)

// Suite runs faults, one at a time, each against a fresh cluster of four
// banknode processes under bankload, and audits every node after each.
type Suite struct {
	BinDir, Dir string // binaries (testbed.Build); logs, one directory per fault
	// NextBinDir holds the binaries of the next version of the service
	// (testbed.Build with testbed.NextVersion), which the faults that
	// upgrade nodes need; without it they are skipped.
	NextBinDir string

	Duration time.Duration // of each fault's load
	Rate     int           // operations per second, all writers together
	Accounts int
	Callers  int      // per writer process
	Writers  int      // writer processes in the several-writers fault
	Env      []string // extra environment for every process
	// AuditTimeout bounds the audit's wait for the nodes to converge.
	AuditTimeout time.Duration
	// CheckTimeout bounds the linearizability check of each fault's
	// history (history.DefaultTimeout if 0).
	CheckTimeout time.Duration
	// Seed fixes the random row's schedule of faults; 0 draws a new one.
	Seed uint64

	Out io.Writer // timeline
}

// Row is the outcome of one fault.
type Row struct {
	Fault         string
	Skipped       string // why the fault did not run, if it did not
	Ops           uint64
	Failed        uint64 // operations that ended in an error other than uncertain or ErrInsufficientFunds
	Uncertain     uint64 // writes of unknown outcome
	Indeterminate uint64 // operations of unknown outcome in the history, reads too
	Lost          int
	AppliedTwice  int
	Contradicting int
	// FailedAfterHeal counts the operations begun healGrace or more after
	// a partition healed that failed for want of service.
	FailedAfterHeal int
	// NewMethods counts the calls of the methods the next version added,
	// made by its writers, by outcome (see cli.Summary.NewMethods).
	NewMethods map[string]uint64
	CatchUp    []catchUp
	// Linearizable is the verdict of the check of every process's history
	// together: yes, no or unknown; LinearizableDetail says why not yes.
	Linearizable       string
	LinearizableDetail string
	WritesAlone        string // the verdict without the reads, when Linearizable is no
	// StaleReadsOnly: the row failed only because reads were not
	// linearizable; the writes alone are.
	StaleReadsOnly bool
	AuditPassed    bool
	Passed         bool
	Notes          []string // what the fault did, and why the row failed
}

// catchUp is how long a node took to be ready again.
type catchUp struct {
	node  string
	took  time.Duration
	ready bool // false: not ready within the bound
}

// heartbeatTimeout is the nodes' heartbeat timeout: FFGEN_HEARTBEAT_TIMEOUT
// as the suite's processes get it, else the runtime's default.
func (s *Suite) heartbeatTimeout() time.Duration {
	v := ""
	for _, kv := range append(os.Environ(), s.Env...) {
		if k, val, ok := strings.Cut(kv, "="); ok && k == "FFGEN_HEARTBEAT_TIMEOUT" {
			v = val
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	return runtime.DefaultHeartbeatTimeout
}

// catchUpBound bounds the wait for a node to be ready again: generous, so
// that a slow machine is not mistaken for a node that never catches up.
const catchUpBound = 90 * time.Second

// env is what a fault acts on.
type env struct {
	*testbed.Cluster
	suite *Suite
	ctx   context.Context // the fault's row
	begin time.Time       // the load's start
	fw    *firewall       // nil where partitions cannot run
	sides []side          // of the fault's split, if it has one

	mu       sync.Mutex
	watches  map[string]*readyWatch // by node: since it last came back
	notes    []string
	healedAt time.Time // when the fault's partition last healed
}

// readyWatch times a node from when it came back (started, thawed,
// healed) until its /health/ready first answers 200.
type readyWatch struct {
	since time.Time
	done  chan struct{}
	took  time.Duration
	ready bool
}

// at waits until d into the load, or ctx's end.
func (e *env) at(ctx context.Context, d time.Duration) error {
	sleep(ctx, time.Until(e.begin.Add(d)))
	return ctx.Err()
}

// recover notes that n came back now: its catch-up is timed from here,
// by polling its readiness until the bound or until it comes back again.
func (e *env) recover(n *testbed.Node) {
	w := &readyWatch{since: time.Now(), done: make(chan struct{})}
	e.mu.Lock()
	e.watches[n.Name] = w
	e.mu.Unlock()
	go func() {
		defer close(w.done)
		current := func() bool { e.mu.Lock(); defer e.mu.Unlock(); return e.watches[n.Name] == w }
		for current() && time.Since(w.since) < catchUpBound && e.ctx.Err() == nil {
			if e.Ready(n) {
				w.took, w.ready = time.Since(w.since), true
				return
			}
			sleep(e.ctx, 50*time.Millisecond)
		}
	}()
}

// healed notes that the fault's partition healed, and when.
func (e *env) healed(format string, args ...any) {
	e.note(format, args...)
	e.mu.Lock()
	e.healedAt = time.Now()
	e.mu.Unlock()
}

func (e *env) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.Logf("%s", msg)
	e.mu.Lock()
	e.notes = append(e.notes, msg)
	e.mu.Unlock()
}

// restart starts n again and notes it.
func (e *env) restart(n *testbed.Node) error {
	if err := e.Restart(n); err != nil {
		return err
	}
	e.recover(n)
	return nil
}

// fault is one scenario of the suite.
type fault struct {
	name           string
	about          string
	severalWriters bool // Suite.Writers writer processes, not one
	firewall       bool // needs iptables
	mayCut         bool // uses iptables where it runs, and does without elsewhere
	// sides splits the nodes for e.fw.split: each side's nodes, and a
	// writer beside each side (one per side, instead of one in all), run
	// under a group ID of the side's. Needs iptables.
	sides [][]string
	// tieBreaker adds the tie-breaker node t1 (banknode -tiebreaker).
	tieBreaker bool
	// nextVersion: every other writer is a client of the next version of
	// the service (Suite.NextBinDir), and the fault may upgrade nodes to it.
	nextVersion bool
	// prepare, if set, runs before the cluster starts, with the fault's
	// directory; it returns what undoes it after the row. An error
	// wrapping errSkip skips the row.
	prepare func(ctx context.Context, dir string) (func(), error)
	// env is the row's extra environment for every process.
	env []string
	// healedWithin, if set, bounds every node's catch-up: the row fails
	// if a node is ready later than that after the fault let it go.
	healedWithin time.Duration
	run          func(ctx context.Context, e *env) error
}

// runFault runs one fault against a fresh cluster and audits it.
func (s *Suite) runFault(ctx context.Context, f fault, fw *firewall) Row {
	row := Row{Fault: f.name}
	if (f.firewall || f.sides != nil) && fw == nil {
		row.Skipped = errNoFirewall.Error()
		return row
	}
	if f.nextVersion && s.NextBinDir == "" {
		row.Skipped = "needs the next version's banknode and bankload (Suite.NextBinDir, built with -tags " + testbed.NextVersion + ")"
		return row
	}
	dir := filepath.Join(s.Dir, f.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		row.Notes = append(row.Notes, err.Error())
		return row
	}
	fmt.Fprintf(s.Out, "\n== %s: %s\n", f.name, f.about)
	// Every node keeps the ledger on disk, as a deployment should.
	cfg := testbed.Config{BinDir: s.BinDir, Dir: dir, Env: append(slices.Clip(s.Env), f.env...), Out: s.Out, Prefix: "faults", TieBreaker: f.tieBreaker, DataDirs: true}
	if f.prepare != nil {
		undo, err := f.prepare(ctx, dir)
		if errors.Is(err, errSkip) {
			row.Skipped = err.Error()
			return row
		}
		if err != nil {
			row.Notes = append(row.Notes, err.Error())
			return row
		}
		defer undo()
	}
	var gids []uint32
	if f.sides != nil {
		gids = sideGIDs(len(f.sides))
		byNode := map[string]uint32{}
		var sides []side
		for i, names := range f.sides {
			sides = append(sides, side{gid: gids[i]})
			for _, name := range names {
				byNode[name] = gids[i]
			}
		}
		cfg.GID = func(n *testbed.Node) uint32 { return byNode[n.Name] }
		// Before any process of a side starts: its connections are
		// labelled as they open.
		defer fw.unmark(context.WithoutCancel(ctx))
		if err := fw.mark(ctx, sides); err != nil {
			row.Notes = append(row.Notes, err.Error())
			return row
		}
	}
	c, err := testbed.Start(ctx, cfg)
	if err != nil {
		row.Notes = append(row.Notes, err.Error())
		return row
	}
	defer c.Close()
	e := &env{Cluster: c, suite: s, ctx: ctx, fw: fw, watches: map[string]*readyWatch{}}
	for i, names := range f.sides {
		sd := side{gid: gids[i]}
		for _, name := range names {
			n := c.Node(name)
			if n == nil {
				row.Notes = append(row.Notes, "no node "+name)
				return row
			}
			sd.nodes = append(sd.nodes, n)
		}
		e.sides = append(e.sides, sd)
	}
	if err := s.load(ctx, e, f, dir, &row); err != nil {
		row.Notes = append(row.Notes, err.Error())
	}
	row.Notes = append(e.notes, row.Notes...)
	return row
}

// load opens the accounts, runs the writers with the fault, waits for
// every node to be back and ready, and audits.
func (s *Suite) load(ctx context.Context, e *env, f fault, dir string, row *Row) error {
	run := "f" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	common := []string{
		"-groups", strings.Join(testbed.Groups, ","),
		"-mgmt", strings.Join(e.MgmtAddrs(), ","), "-run", run, "-accounts", strconv.Itoa(s.Accounts),
		"-progress", "0", "-require-all",
	}
	openLog, openHist := filepath.Join(dir, "open.json"), filepath.Join(dir, "open.history.jsonl")
	if err := s.bankload(ctx, e, dir, "open", append(common, "-duration", "0", "-writes", openLog, "-history", openHist)...); err != nil {
		return fmt.Errorf("opening the accounts: %w", err)
	}
	writers := 1
	if f.severalWriters {
		writers = max(s.Writers, 1)
	}
	if len(e.sides) > 0 {
		writers = len(e.sides)
	}
	logs, hists := []string{openLog}, []string{openHist}
	var sums []string
	var wg sync.WaitGroup
	errs := make([]error, writers)
	e.begin = time.Now()
	for i := range writers {
		name := fmt.Sprintf("writer%d", i+1)
		// The paths are taken now: the slices grow while writers run.
		logPath, sumPath, histPath := filepath.Join(dir, name+".json"), filepath.Join(dir, name+"-summary.json"), filepath.Join(dir, name+".history.jsonl")
		logs = append(logs, logPath)
		sums = append(sums, sumPath)
		hists = append(hists, histPath)
		var gid uint32 // beside its side's nodes, if the fault splits them
		if len(e.sides) > 0 {
			gid = e.sides[i].gid
		}
		bin := s.BinDir
		if f.nextVersion && i%2 == 1 {
			bin = s.NextBinDir
		}
		wg.Go(func() {
			err := s.bankloadIn(ctx, e, bin, dir, name, gid, append(common, "-name", name, "-open=false", "-audit=false",
				"-duration", s.Duration.String(), "-rate", strconv.Itoa(max(s.Rate/writers, 1)), "-callers", strconv.Itoa(s.Callers),
				"-writes", logPath, "-json", sumPath, "-history", histPath)...)
			// Exit 1 without an audit is a caller that waited past the
			// operation deadline: a timing, which the suite reports but
			// does not judge.
			if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
				errs[i] = err
			}
		})
	}
	e.Logf("%d writer(s) started for %v at %d ops/s in all", writers, s.Duration, s.Rate)
	faultCtx, cancel := context.WithTimeout(ctx, s.Duration+2*catchUpBound)
	defer cancel()
	faultErr := f.run(faultCtx, e)
	if e.fw != nil {
		e.fw.heal(context.WithoutCancel(ctx)) // whatever the fault did
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return errors.Join(faultErr, fmt.Errorf("writers: %w", err))
	}
	for _, p := range sums {
		var sum cli.Summary
		if err := testbed.ReadJSON(p, &sum); err != nil {
			return errors.Join(faultErr, err)
		}
		row.Ops += sum.Operations
		row.Failed += sum.Failed
		row.Uncertain += sum.Uncertain
		row.Indeterminate += sum.Indeterminate
		for k, n := range sum.NewMethods {
			if row.NewMethods == nil {
				row.NewMethods = map[string]uint64{}
			}
			row.NewMethods[k] += n
		}
		if sum.Overdue > 0 {
			e.note("%s: %d operations waited past the operation deadline", filepath.Base(p), sum.Overdue)
		}
	}
	// Every node must be back: a fault that could not restart one fails.
	for _, n := range e.Nodes {
		if !n.Running() {
			faultErr = errors.Join(faultErr, fmt.Errorf("%s is not running after the fault", n.Name))
			if err := e.restart(n); err != nil {
				return errors.Join(faultErr, err)
			}
		}
	}
	row.CatchUp = e.catchUps()
	ops, herr := history.ReadFiles(hists...)
	if herr != nil {
		row.Linearizable = "unreadable"
		e.note("history: %v", herr)
	}
	linearizable := herr == nil && s.checkHistories(e, dir, ops, row)
	e.failedAfterHeal(ops, row)
	auditPath := filepath.Join(dir, "audit.json")
	err := s.bankload(ctx, e, dir, "audit", "-audit-only", strings.Join(logs, ","), "-mgmt", strings.Join(e.MgmtAddrs(), ","),
		"-require-all", "-audit-timeout", s.AuditTimeout.String(), "-json", auditPath)
	var audit cli.Summary
	if rerr := testbed.ReadJSON(auditPath, &audit); rerr != nil {
		return errors.Join(faultErr, err, rerr)
	}
	row.Lost, row.AppliedTwice, row.Contradicting = audit.Lost, audit.AppliedTwice, audit.Contradicting
	row.AuditPassed = audit.AuditPassed
	row.Passed = audit.AuditPassed && faultErr == nil
	for _, n := range audit.Nodes {
		if n.JournalEvicted > 0 {
			row.Passed = false
			row.Notes = append(row.Notes, fmt.Sprintf("%s's journal forgot %d writes: lost writes not measurable there", n.Node, n.JournalEvicted))
		}
	}
	for _, cu := range row.CatchUp {
		if !cu.ready {
			row.Passed = false
		}
		if f.healedWithin > 0 && cu.took > f.healedWithin {
			row.Passed = false
			e.note("%s was ready %s after the heal, over the bound of %s", cu.node, cu.took.Round(100*time.Millisecond), f.healedWithin)
		}
	}
	if !audit.AuditPassed {
		row.Notes = append(row.Notes, "audit failed; see "+filepath.Join(dir, "audit.out"))
	}
	row.StaleReadsOnly = row.Passed && !linearizable && row.WritesAlone == string(history.Yes)
	row.Passed = row.Passed && linearizable
	return faultErr
}

// catchUps waits, for every node that came back during the fault, until
// its /health/ready answered 200 or the bound passed.
func (e *env) catchUps() []catchUp {
	var out []catchUp
	for _, n := range e.Nodes {
		e.mu.Lock()
		w := e.watches[n.Name]
		e.mu.Unlock()
		if w == nil {
			continue
		}
		<-w.done
		out = append(out, catchUp{node: n.Name, took: w.took, ready: w.ready})
		if !w.ready {
			e.note("%s not ready %v after it came back", n.Name, catchUpBound)
		}
	}
	return out
}

// checkHistories checks every process's history together for
// linearizability into row, and reports whether the row may pass: not when
// the history is not linearizable or cannot be read. The check's result
// goes to dir/check.json, and a drawing of a part that fails to
// dir/history.html.
func (s *Suite) checkHistories(e *env, dir string, ops []history.Op, row *Row) bool {
	e.Logf("checking %d operations for linearizability", len(ops))
	r := history.Check(ops, history.Options{Timeout: s.CheckTimeout, Visualize: filepath.Join(dir, "history.html")})
	row.Linearizable, row.LinearizableDetail, row.WritesAlone = string(r.Verdict), r.String(), string(r.WritesAlone)
	e.Logf("checked %d operations (%d of them taken in) in %d parts, the largest of %d, in %.1fs",
		r.Ops, r.Checked, r.Parts, r.Largest, r.Took.Seconds())
	if b, err := json.MarshalIndent(r, "", "  "); err == nil {
		os.WriteFile(filepath.Join(dir, "check.json"), b, 0o644)
	}
	if r.Verdict != history.Yes {
		e.note("history linearizable: %s", r)
	} else {
		e.Logf("history linearizable: yes")
	}
	return r.Verdict != history.No
}

// healGrace is how long after a partition heals its clients may still
// fail operations they begin: the nodes cut off catch up, and a side
// without a leader elects one.
const healGrace = time.Second

// failedAfterHeal counts the operations begun healGrace or more after the
// fault's partition healed that failed for want of service
// (Row.FailedAfterHeal), and notes them.
func (e *env) failedAfterHeal(ops []history.Op, row *Row) {
	e.mu.Lock()
	at := e.healedAt
	e.mu.Unlock()
	if at.IsZero() {
		return
	}
	var begun int
	row.FailedAfterHeal, begun = failedFrom(ops, at.Add(healGrace))
	e.note("%d of the %d operations begun %v or more after the heal failed", row.FailedAfterHeal, begun, healGrace)
}

// failedFrom counts the operations begun at from or later, and those of
// them that failed for want of service (history.Op.Failed).
func failedFrom(ops []history.Op, from time.Time) (failed, begun int) {
	for i := range ops {
		if ops[i].Invoke < from.UnixNano() {
			continue
		}
		begun++
		if ops[i].Failed() {
			failed++
		}
	}
	return failed, begun
}

// bankload runs bankload with args, its output in dir/name.out. A
// non-zero exit is an error.
func (s *Suite) bankload(ctx context.Context, e *env, dir, name string, args ...string) error {
	return s.bankloadAs(ctx, e, dir, name, 0, args...)
}

// bankloadAs is bankload under group ID gid (0: the suite's).
func (s *Suite) bankloadAs(ctx context.Context, e *env, dir, name string, gid uint32, args ...string) error {
	return s.bankloadIn(ctx, e, s.BinDir, dir, name, gid, args...)
}

// bankloadIn is bankloadAs with the bankload of bin (a version's build).
func (s *Suite) bankloadIn(ctx context.Context, e *env, bin, dir, name string, gid uint32, args ...string) error {
	cmd := e.CommandIn(bin, "bankload", args...)
	testbed.SetGID(cmd, gid)
	outPath := filepath.Join(dir, name+".out")
	f, err := os.Create(outPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := testbed.Run(ctx, cmd); err != nil {
		return fmt.Errorf("bankload %s: %w (see %s)", name, err, outPath)
	}
	return nil
}
