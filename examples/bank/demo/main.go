//go:build unix

// Command demo runs the bank example's failover scenario (make demo): it
// builds banknode and bankload, starts four nodes on loopback in two
// failure groups, runs bankload against them, kills one node with SIGKILL
// and freezes another with SIGSTOP for a second during the load, and
// prints bankload's summary with the audit of every node still running.
// Every process it started is stopped on exit, Ctrl-C included.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

func main() {
	s := Scenario{Out: os.Stdout, Err: os.Stderr}
	flag.DurationVar(&s.Duration, "duration", 40*time.Second, "load duration")
	flag.DurationVar(&s.KillAt, "kill-at", 10*time.Second, "when to SIGKILL node a1")
	flag.DurationVar(&s.FreezeAt, "freeze-at", 20*time.Second, "when to SIGSTOP node b1")
	flag.DurationVar(&s.FreezeFor, "freeze-for", time.Second, "how long b1 stays frozen")
	flag.IntVar(&s.Accounts, "accounts", 200, "accounts")
	flag.IntVar(&s.Callers, "callers", 16, "concurrent callers")
	flag.IntVar(&s.Rate, "rate", 0, "operations per second (0: as fast as the callers go)")
	keep := flag.Bool("keep", false, "keep the logs directory")
	flag.Parse()
	os.Exit(run(s, *keep))
}

func run(s Scenario, keep bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "bankdemo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	code := 2
	defer func() {
		if keep || code != 0 {
			fmt.Printf("demo: node logs kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	s.Dir, s.BinDir = dir, dir
	fmt.Println("demo: building banknode and bankload")
	if err := testbed.Build(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return code
	}
	res, err := s.Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return code
	}
	if code = res.LoadExit; code != 0 {
		fmt.Fprintf(os.Stderr, "demo: bankload exited %d\n", code)
	}
	return code
}
