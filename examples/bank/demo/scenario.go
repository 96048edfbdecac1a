//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
)

// Scenario is the demo: four banknode processes on loopback, two failure
// groups of two, and bankload against them while one node is killed and
// another frozen.
type Scenario struct {
	BinDir string // holds banknode and bankload (see Build)
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

	env   []string // of every process: ours, Env, and the management token
	token string   // the nodes' management bearer token
}

// Result is what a run produced.
type Result struct {
	Summary  cli.Summary
	LoadExit int // bankload's exit code: 0 when the audit passed
}

// Build compiles banknode and bankload into dir.
func Build(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", dir+string(filepath.Separator),
		"github.com/ffgen/ffgen/examples/bank/cmd/banknode",
		"github.com/ffgen/ffgen/examples/bank/cmd/bankload")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// node is one banknode process.
type node struct {
	name, group       string
	rpc, gossip, mgmt string
	cmd               *exec.Cmd
	exited            chan struct{} // closed once the process is reaped
}

var groups = []string{"a", "b"}

// Run runs the scenario and stops every process it started before it
// returns, also when ctx is cancelled (Ctrl-C) or a step fails.
func (s *Scenario) Run(ctx context.Context) (*Result, error) {
	s.Out, s.Err = lockedWriter(s.Out), lockedWriter(s.Err)
	s.env = append(os.Environ(), s.Env...)
	if s.token = lastEnv(s.env, cli.ManageTokenEnv); s.token == "" {
		// Guard the nodes' management endpoints as a deployment would.
		s.token = rand.Text()
		s.env = append(s.env, cli.ManageTokenEnv+"="+s.token)
	}
	ports, err := freePorts(12)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	var nodes []*node
	for gi, g := range groups {
		for j := 1; j <= 2; j++ {
			i := len(nodes)
			nodes = append(nodes, &node{name: fmt.Sprintf("%s%d", g, j), group: groups[gi],
				rpc: addr(3 * i), gossip: addr(3*i + 1), mgmt: addr(3*i + 2)})
		}
	}
	defer s.stopAll(nodes)
	var seeds, mgmts []string
	for _, n := range nodes {
		seeds = append(seeds, n.gossip)
		mgmts = append(mgmts, n.mgmt)
	}
	for _, n := range nodes {
		if err := s.start(n, seeds); err != nil {
			return nil, err
		}
	}
	if err := waitReady(ctx, s.client(), nodes, 30*time.Second); err != nil {
		return nil, err
	}
	s.logf("4 nodes ready: %s", describe(nodes))

	summaryPath := filepath.Join(s.Dir, "summary.json")
	load := exec.Command(filepath.Join(s.BinDir, "bankload"),
		"-groups", strings.Join(groups, ","), "-mgmt", strings.Join(mgmts, ","),
		"-duration", s.Duration.String(), "-accounts", strconv.Itoa(s.Accounts), "-callers", strconv.Itoa(s.Callers),
		"-rate", strconv.Itoa(s.Rate), "-json", summaryPath)
	load.Env = s.env
	load.Stdout, load.Stderr = s.Out, s.Err
	load.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches us, and we stop it
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
	s.logf("bankload started for %v; a1 is killed at %v, b1 frozen at %v for %v", s.Duration, s.KillAt, s.FreezeAt, s.FreezeFor)

	type event struct {
		at time.Duration
		do func()
	}
	events := []event{
		{s.KillAt, func() {
			s.signal(nodes[0], syscall.SIGKILL)
			go s.watchDeclaredDead(ctx, nodes[1], nodes[0].name, finished)
		}},
		{s.FreezeAt, func() { s.signal(nodes[2], syscall.SIGSTOP) }},
		{s.FreezeAt + s.FreezeFor, func() { s.signal(nodes[2], syscall.SIGCONT) }},
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
func (s *Scenario) watchDeclaredDead(ctx context.Context, observer *node, name string, stop <-chan struct{}) {
	hc := s.client()
	begin := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := hc.Get("http://" + observer.mgmt + "/cluster/members/" + name)
		if err != nil {
			continue
		}
		var m struct{ State string }
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if m.State == "dead" || resp.StatusCode == http.StatusNotFound {
			s.logf("membership declared %s dead %.1fs after the kill; operations had failed over long before", name, time.Since(begin).Seconds())
			return
		}
	}
}

// client returns an HTTP client for the nodes' management endpoints.
func (s *Scenario) client() *http.Client { return cli.ManagementClient(time.Second, s.token) }

// lastEnv returns the value of key in env, the last one winning as in
// exec.Cmd, or "".
func lastEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

func (s *Scenario) logf(format string, args ...any) {
	fmt.Fprintf(s.Out, "demo: "+format+"\n", args...)
}

func describe(nodes []*node) string {
	var parts []string
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("%s(group %s, rpc %s, mgmt %s)", n.name, n.group, n.rpc, n.mgmt))
	}
	return strings.Join(parts, " ")
}

func (s *Scenario) start(n *node, seeds []string) error {
	logf, err := os.Create(filepath.Join(s.Dir, n.name+".log"))
	if err != nil {
		return err
	}
	n.cmd = exec.Command(filepath.Join(s.BinDir, "banknode"),
		"-name", n.name, "-group", n.group, "-groups", strings.Join(groups, ","),
		"-rpc", n.rpc, "-gossip", n.gossip, "-mgmt", n.mgmt, "-seeds", strings.Join(seeds, ","))
	n.cmd.Env = s.env
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	n.exited = make(chan struct{})
	go func() {
		n.cmd.Wait()
		logf.Close()
		close(n.exited)
	}()
	return nil
}

// signal sends sig to n and notes it in the timeline.
func (s *Scenario) signal(n *node, sig syscall.Signal) {
	if err := n.cmd.Process.Signal(sig); err != nil {
		s.logf("%s %s: %v", sig, n.name, err)
		return
	}
	s.logf("%-10s %s (group %s)", strings.ToUpper(sigName(sig)), n.name, n.group)
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "sigkill"
	case syscall.SIGSTOP:
		return "sigstop"
	case syscall.SIGCONT:
		return "sigcont"
	}
	return sig.String()
}

// stopAll thaws and terminates every node still running, and kills those
// that do not exit within a few seconds.
func (s *Scenario) stopAll(nodes []*node) {
	for _, n := range nodes {
		if n.exited == nil {
			continue
		}
		select {
		case <-n.exited:
		default:
			n.cmd.Process.Signal(syscall.SIGCONT)
			n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(10 * time.Second)
	for _, n := range nodes {
		if n.exited == nil {
			continue
		}
		select {
		case <-n.exited:
		case <-deadline:
			n.cmd.Process.Kill()
			<-n.exited
		}
	}
}

// waitReady polls every node's /health/ready.
func waitReady(ctx context.Context, hc *http.Client, nodes []*node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, n := range nodes {
		for {
			select {
			case <-n.exited:
				return fmt.Errorf("%s exited during startup; see %s.log", n.name, n.name)
			default:
			}
			resp, err := hc.Get("http://" + n.mgmt + "/health/ready")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after %v (last: %v)", n.name, timeout, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// freePorts returns n distinct loopback ports that are free for TCP and
// UDP at the time of the call (gossip uses both on one port).
func freePorts(n int) ([]int, error) {
	var ports []int
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10*n {
			return nil, errors.New("cannot find free loopback ports")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken for UDP; keep the TCP one held so it is not offered again
		}
		held = append(held, u)
		ports = append(ports, port)
	}
	return ports, nil
}

// lockedWriter serializes writes: the timeline and bankload's output, which
// os/exec copies on its own goroutine, share s.Out.
func lockedWriter(w io.Writer) io.Writer {
	if lw, ok := w.(*syncWriter); ok {
		return lw
	}
	return &syncWriter{w: w}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
