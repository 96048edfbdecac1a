//go:build unix

// Command faults is the bank example's fault suite (make faults): for each
// fault it starts four banknode processes on loopback (a1, a2 in group a;
// b1, b2 in group b), opens accounts, runs bankload against them, injects
// the fault (SIGKILL and restart, a rolling restart, SIGSTOP, a partition
// with iptables, hostile connections, several writers, the raft leader
// killed mid-write, a restart during catch-up, a split of the nodes with a
// writer beside each side, the leader frozen around the heartbeat timeout,
// the loss of a failure group with and without a tie-breaker node), waits
// until every node is back and ready, and audits every node: balances, and
// each acknowledged write looked up by its operation ID in every node's
// journal. It then checks the history of every bankload together for
// linearizability. It prints a table per fault and exits 1 if any fault
// failed, 2 if it could not run. Every process it started and every firewall rule it added are
// removed on exit, Ctrl-C included.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/history"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

func main() {
	s := Suite{Out: os.Stdout}
	flag.DurationVar(&s.Duration, "duration", 25*time.Second, "load per fault")
	flag.IntVar(&s.Rate, "rate", 2000, "operations per second, all writers together")
	flag.IntVar(&s.Accounts, "accounts", 100, "accounts")
	flag.IntVar(&s.Callers, "callers", 8, "concurrent callers per writer process")
	flag.IntVar(&s.Writers, "writers", 3, "writer processes in the several-writers fault")
	flag.DurationVar(&s.AuditTimeout, "audit-timeout", 30*time.Second, "how long each audit waits for the nodes to converge")
	flag.DurationVar(&s.CheckTimeout, "check-timeout", history.DefaultTimeout, "how long each fault's linearizability check may take before it answers unknown")
	only := flag.String("only", "", "run only these faults, comma-separated (default: all): "+faultNames())
	keep := flag.Bool("keep", false, "keep the logs directory")
	flag.Uint64Var(&s.Seed, "seed", 0, "the random row's schedule (default: a new one, printed in the row's notes)")
	flag.Parse()
	os.Exit(run(s, *only, *keep))
}

func faultNames() string {
	var names []string
	for _, f := range faults {
		names = append(names, f.name)
	}
	return strings.Join(names, ",")
}

func run(s Suite, only string, keep bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	selected, err := selectFaults(only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "bankfaults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 2
	}
	code := 2
	defer func() {
		if keep || code != 0 {
			fmt.Printf("faults: logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	s.Dir, s.BinDir = dir, dir
	fmt.Println("faults: building banknode and bankload")
	if err := testbed.Build(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return code
	}
	if slices.ContainsFunc(selected, func(f fault) bool { return f.nextVersion }) {
		s.NextBinDir = filepath.Join(dir, "next")
		fmt.Println("faults: building banknode and bankload of the next version of the service")
		if err := testbed.Build(ctx, s.NextBinDir, testbed.NextVersion); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
			return code
		}
	}
	rows, err := s.Run(ctx, selected)
	printTable(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return code
	}
	code = 0
	for _, r := range rows {
		if r.Skipped == "" && !r.Passed {
			code = 1
		}
	}
	return code
}

// selectFaults returns the faults named in only, all if empty.
func selectFaults(only string) ([]fault, error) {
	if only == "" {
		return faults, nil
	}
	var out []fault
	for _, name := range strings.Split(only, ",") {
		i := indexFault(strings.TrimSpace(name))
		if i < 0 {
			return nil, fmt.Errorf("no fault %q; the faults are %s", name, faultNames())
		}
		out = append(out, faults[i])
	}
	return out, nil
}

func indexFault(name string) int {
	for i, f := range faults {
		if f.name == name {
			return i
		}
	}
	return -1
}

// Run runs the faults one after another. A partition fault is skipped,
// with the reason, where iptables cannot run.
func (s *Suite) Run(ctx context.Context, faults []fault) ([]Row, error) {
	var fw *firewall
	for _, f := range faults {
		if f.firewall || f.mayCut || f.sides != nil {
			var err error
			if fw, err = newFirewall(ctx); err != nil {
				fmt.Fprintf(s.Out, "faults: partitions skipped: %v\n", err)
			} else {
				defer fw.close()
			}
			break
		}
	}
	if s.Seed == 0 {
		s.Seed = rand.Uint64() >> 16 // short enough to type
	}
	var rows []Row
	for _, f := range faults {
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
		r := s.runFault(ctx, f, fw)
		rows = append(rows, r)
		printRow(s.Out, r)
	}
	return rows, errors.Join(ctx.Err())
}
