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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// Suite runs faults, one at a time, each against a fresh cluster of four
// banknode processes under bankload, and audits every node after each.
type Suite struct {
	BinDir, Dir string // binaries (testbed.Build); logs, one directory per fault

	Duration time.Duration // of each fault's load
	Rate     int           // operations per second, all writers together
	Accounts int
	Callers  int      // per writer process
	Writers  int      // writer processes in the several-writers fault
	Env      []string // extra environment for every process
	// AuditTimeout bounds the audit's wait for the nodes to converge.
	AuditTimeout time.Duration

	Out io.Writer // timeline
}

// Row is the outcome of one fault.
type Row struct {
	Fault         string
	Skipped       string // why the fault did not run, if it did not
	Ops           uint64
	Failed        uint64 // operations that ended in an error other than uncertain or ErrInsufficientFunds
	Uncertain     uint64
	Lost          int
	AppliedTwice  int
	Contradicting int
	CatchUp       []catchUp
	Passed        bool
	Notes         []string // what the fault did, and why the row failed
}

// catchUp is how long a node took to be ready again.
type catchUp struct {
	node  string
	took  time.Duration
	ready bool // false: not ready within the bound
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

	mu      sync.Mutex
	watches map[string]*readyWatch // by node: since it last came back
	notes   []string
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
	run            func(ctx context.Context, e *env) error
}

// runFault runs one fault against a fresh cluster and audits it.
func (s *Suite) runFault(ctx context.Context, f fault, fw *firewall) Row {
	row := Row{Fault: f.name}
	if f.firewall && fw == nil {
		row.Skipped = errNoFirewall.Error()
		return row
	}
	dir := filepath.Join(s.Dir, f.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		row.Notes = append(row.Notes, err.Error())
		return row
	}
	fmt.Fprintf(s.Out, "\n== %s: %s\n", f.name, f.about)
	c, err := testbed.Start(ctx, testbed.Config{BinDir: s.BinDir, Dir: dir, Env: s.Env, Out: s.Out, Prefix: "faults"})
	if err != nil {
		row.Notes = append(row.Notes, err.Error())
		return row
	}
	defer c.Close()
	e := &env{Cluster: c, suite: s, ctx: ctx, fw: fw, watches: map[string]*readyWatch{}}
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
	openLog := filepath.Join(dir, "open.json")
	if err := s.bankload(ctx, e, dir, "open", append(common, "-duration", "0", "-writes", openLog)...); err != nil {
		return fmt.Errorf("opening the accounts: %w", err)
	}
	writers := 1
	if f.severalWriters {
		writers = max(s.Writers, 1)
	}
	logs := []string{openLog}
	var sums []string
	var wg sync.WaitGroup
	errs := make([]error, writers)
	e.begin = time.Now()
	for i := range writers {
		name := fmt.Sprintf("writer%d", i+1)
		// The paths are taken now: the slices grow while writers run.
		logPath, sumPath := filepath.Join(dir, name+".json"), filepath.Join(dir, name+"-summary.json")
		logs = append(logs, logPath)
		sums = append(sums, sumPath)
		wg.Go(func() {
			err := s.bankload(ctx, e, dir, name, append(common, "-name", name, "-open=false", "-audit=false",
				"-duration", s.Duration.String(), "-rate", strconv.Itoa(max(s.Rate/writers, 1)), "-callers", strconv.Itoa(s.Callers),
				"-writes", logPath, "-json", sumPath)...)
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
		if err := readJSON(p, &sum); err != nil {
			return errors.Join(faultErr, err)
		}
		row.Ops += sum.Operations
		row.Failed += sum.Failed
		row.Uncertain += sum.Uncertain
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
	auditPath := filepath.Join(dir, "audit.json")
	err := s.bankload(ctx, e, dir, "audit", "-audit-only", strings.Join(logs, ","), "-mgmt", strings.Join(e.MgmtAddrs(), ","),
		"-require-all", "-audit-timeout", s.AuditTimeout.String(), "-json", auditPath)
	var audit cli.Summary
	if rerr := readJSON(auditPath, &audit); rerr != nil {
		return errors.Join(faultErr, err, rerr)
	}
	row.Lost, row.AppliedTwice, row.Contradicting = audit.Lost, audit.AppliedTwice, audit.Contradicting
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
	}
	if !audit.AuditPassed {
		row.Notes = append(row.Notes, "audit failed; see "+filepath.Join(dir, "audit.out"))
	}
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

// bankload runs bankload with args, its output in dir/name.out. A
// non-zero exit is an error.
func (s *Suite) bankload(ctx context.Context, e *env, dir, name string, args ...string) error {
	cmd := e.Command("bankload", args...)
	outPath := filepath.Join(dir, name+".out")
	f, err := os.Create(outPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := runCmd(ctx, cmd); err != nil {
		return fmt.Errorf("bankload %s: %w (see %s)", name, err, outPath)
	}
	return nil
}

// runCmd runs cmd, interrupting it if ctx ends.
func runCmd(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		cmd.Process.Signal(os.Interrupt)
		return errors.Join(ctx.Err(), <-done)
	}
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
