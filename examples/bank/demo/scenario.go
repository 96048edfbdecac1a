//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// Scenario is the demo: four banknode processes on loopback, two failure
// groups of two, and bankload against them while one node is killed and
// another frozen.
type Scenario struct {
	BinDir string // holds banknode and bankload (see testbed.Build)
	Dir    string // logs and the summary go here

	Duration  time.Duration // of the load
	KillAt    time.Duration // SIGKILL node a1 this long into the load
	FreezeAt  time.Duration // SIGSTOP node b1 this long into the load
	FreezeFor time.Duration // then SIGCONT
	Accounts  int
	Callers   int
	Rate      int      // operations per second; 0: as fast as the callers go
	Env       []string // extra environment for every process, e.g. FFGEN_HEARTBEAT_TIMEOUT=300ms

	Out io.Writer // the scenario's timeline and bankload's summary
	Err io.Writer // bankload's progress lines
}

// Result is what a run produced.
type Result struct {
	Summary  cli.Summary
	LoadExit int // bankload's exit code: 0 when the audit passed
}

// Run runs the scenario and stops every process it started before it
// returns, also when ctx is cancelled (Ctrl-C) or a step fails.
func (s *Scenario) Run(ctx context.Context) (*Result, error) {
	s.Out, s.Err = testbed.LockedWriter(s.Out), testbed.LockedWriter(s.Err)
	// A journal that holds every write of the run (a fast machine makes
	// some 15,000 a second), so that the audit is complete: a write
	// missing from a node's journal is then lost, not forgotten.
	journal := max(bank.DefaultJournal, int(s.Duration.Seconds()+30)*20000)
	c, err := testbed.Start(ctx, testbed.Config{BinDir: s.BinDir, Dir: s.Dir, Env: s.Env, Out: s.Out, Prefix: "demo",
		Args: []string{"-journal", strconv.Itoa(journal)}, DataDirs: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.Logf("4 nodes ready: %s", c.Describe())

	summaryPath := filepath.Join(s.Dir, "summary.json")
	load := c.Command("bankload",
		"-groups", strings.Join(testbed.Groups, ","), "-mgmt", strings.Join(c.MgmtAddrs(), ","),
		"-duration", s.Duration.String(), "-accounts", strconv.Itoa(s.Accounts), "-callers", strconv.Itoa(s.Callers),
		"-rate", strconv.Itoa(s.Rate), "-json", summaryPath)
	load.Stdout, load.Stderr = s.Out, s.Err
	if err := load.Start(); err != nil {
		return nil, fmt.Errorf("start bankload: %w", err)
	}
	loadDone := make(chan error, 1)
	finished := make(chan struct{}) // closed once bankload exits, for watchers
	go func() {
		loadDone <- load.Wait()
		close(finished)
	}()
	begin := time.Now()
	c.Logf("bankload started for %v; a1 is killed at %v, b1 frozen at %v for %v", s.Duration, s.KillAt, s.FreezeAt, s.FreezeFor)

	a1, a2, b1 := c.Node("a1"), c.Node("a2"), c.Node("b1")
	type event struct {
		at time.Duration
		do func()
	}
	events := []event{
		{s.KillAt, func() {
			c.Signal(a1, syscall.SIGKILL)
			go watchDeclaredDead(ctx, c, a2, a1.Name, finished)
		}},
		{s.FreezeAt, func() { c.Signal(b1, syscall.SIGSTOP) }},
		{s.FreezeAt + s.FreezeFor, func() { c.Signal(b1, syscall.SIGCONT) }},
	}
	var loadErr error
wait:
	for {
		var timer <-chan time.Time
		if len(events) > 0 {
			timer = time.After(time.Until(begin.Add(events[0].at)))
		}
		select {
		case <-ctx.Done():
			load.Process.Signal(syscall.SIGINT)
			<-loadDone
			return nil, ctx.Err()
		case <-timer:
			events[0].do()
			events = events[1:]
		case loadErr = <-loadDone:
			break wait
		}
	}
	res := &Result{}
	var exit *exec.ExitError
	switch {
	case errors.As(loadErr, &exit):
		res.LoadExit = exit.ExitCode()
	case loadErr != nil:
		return nil, fmt.Errorf("bankload: %w", loadErr)
	}
	b, err := os.ReadFile(summaryPath)
	if err != nil {
		return res, fmt.Errorf("bankload wrote no summary (exit %d): %w", res.LoadExit, err)
	}
	if err := json.Unmarshal(b, &res.Summary); err != nil {
		return res, fmt.Errorf("summary: %w", err)
	}
	return res, nil
}

// watchDeclaredDead reports when the membership, as observer sees it,
// declares the killed node dead: seconds after operations failed over.
func watchDeclaredDead(ctx context.Context, c *testbed.Cluster, observer *testbed.Node, name string, stop <-chan struct{}) {
	hc := c.Client()
	begin := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := hc.Get("http://" + observer.Mgmt + "/cluster/members/" + name)
		if err != nil {
			continue
		}
		var m struct{ State string }
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m.State == "dead" || resp.StatusCode == http.StatusNotFound {
			c.Logf("membership declared %s dead %.1fs after the kill; operations had failed over long before", name, time.Since(begin).Seconds())
			return
		}
	}
}
