//go:build unix

// Package testbed runs the bank example as real processes on loopback: it
// builds banknode and bankload, starts four nodes in two failure groups,
// and kills, freezes, stops and restarts them. The demo and the fault
// suite share it.
package testbed

import (
	"cmp"
	"context"
	"crypto/rand"
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
	"github.com/ffgen/ffgen/internal/testkit"
)

// Build compiles banknode and bankload into dir, with the build tags given
// (NextVersion: the next version of the service).
func Build(ctx context.Context, dir string, tags ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, goTool(), append(args,
		"github.com/ffgen/ffgen/examples/bank/cmd/banknode",
		"github.com/ffgen/ffgen/examples/bank/cmd/bankload")...)
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

// NextVersion is the build tag of the next version of the bank service
// (examples/bank/internal/v2): banknode and bankload built with it serve
// and call that version, for the mixed-version test.
const NextVersion = "bankv2"

// Groups are the cluster's failure groups, two nodes each. Clients list
// these.
var Groups = []string{"a", "b"}

// TieBreakerGroup is the failure group of the tie-breaker node
// (Config.TieBreaker), which clients do not list.
const TieBreakerGroup = "t"

// Config describes a cluster.
type Config struct {
	BinDir string   // holds banknode and bankload (see Build)
	Dir    string   // node logs go here, one file per node across restarts
	Env    []string // extra environment for every process
	Args   []string // extra banknode flags
	Out    io.Writer
	Prefix string // of the timeline lines written to Out

	// TieBreaker adds a fifth node, t1 in TieBreakerGroup, started with
	// -tiebreaker: it votes but never leads and serves no application
	// traffic; its group is not among the -groups.
	TieBreaker bool
	// DataDirs gives every node a data directory under Dir (data/<name>),
	// the same across its restarts: the ledger's replicated state
	// survives kill -9 of any node, or of all of them.
	DataDirs bool
	// GID, if set, runs each node's process with the group ID it returns
	// (0: unchanged), for firewall rules that match the owner of packets.
	GID func(n *Node) uint32
}

// Node is one banknode process, on the same ports across restarts.
type Node struct {
	Name, Group       string
	RPC, Gossip, Mgmt string // host:port
	TieBreaker        bool   // votes, never leads, serves no clients

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the current process is reaped
	started time.Time
	binDir  string // of its banknode, if not Config.BinDir (UseBinDir)
}

// UseBinDir makes n's next start run the banknode in dir: an upgrade to
// another version once n is stopped and restarted.
func (n *Node) UseBinDir(dir string) {
	n.mu.Lock()
	n.binDir = dir
	n.mu.Unlock()
}

// Cluster is four banknode processes: a1, a2 in group a, b1, b2 in b;
// and t1 in group t with Config.TieBreaker.
type Cluster struct {
	Nodes []*Node

	cfg   Config
	out   io.Writer
	env   []string
	token string
}

// Start starts the nodes on free loopback ports and waits until every one
// is ready. On error it stops what it started.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, out: LockedWriter(cfg.Out)}
	c.env = append(os.Environ(), cfg.Env...)
	if c.token = lastEnv(c.env, cli.ManageTokenEnv); c.token == "" {
		// Guard the nodes' management endpoints as a deployment would.
		c.token = rand.Text()
		c.env = append(c.env, cli.ManageTokenEnv+"="+c.token)
	}
	ports, err := freePorts(3 * (2*len(Groups) + 1))
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	add := func(name, group string) *Node {
		i := len(c.Nodes)
		n := &Node{Name: name, Group: group, RPC: addr(3 * i), Gossip: addr(3*i + 1), Mgmt: addr(3*i + 2)}
		c.Nodes = append(c.Nodes, n)
		return n
	}
	for _, g := range Groups {
		for j := 1; j <= 2; j++ {
			add(fmt.Sprintf("%s%d", g, j), g)
		}
	}
	if cfg.TieBreaker {
		add(TieBreakerGroup+"1", TieBreakerGroup).TieBreaker = true
	}
	for _, n := range c.Nodes {
		if err := c.start(n); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx, 30*time.Second, c.Nodes...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Seeds are the nodes' gossip addresses.
func (c *Cluster) Seeds() []string { return c.addrs(func(n *Node) string { return n.Gossip }) }

// MgmtAddrs are the management addresses of the nodes that serve clients
// (a tie-breaker does not): the ones clients follow and audits read.
func (c *Cluster) MgmtAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		if !n.TieBreaker {
			out = append(out, n.Mgmt)
		}
	}
	return out
}

func (c *Cluster) addrs(f func(*Node) string) []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, f(n))
	}
	return out
}

// nodeArgs are n's banknode flags.
func (c *Cluster) nodeArgs(n *Node) []string {
	// A tie-breaker's group is not one of -groups: no client or node
	// sends it calls.
	args := []string{
		"-name", n.Name, "-group", n.Group, "-groups", strings.Join(Groups, ","),
		"-rpc", n.RPC, "-gossip", n.Gossip, "-mgmt", n.Mgmt, "-seeds", strings.Join(c.Seeds(), ",")}
	// Every node votes: the cluster forms once all have started.
	args = append(args, "-voters", strings.Join(c.addrs(func(n *Node) string { return n.Name }), ","))
	if n.TieBreaker {
		args = append(args, "-tiebreaker")
	}
	if c.cfg.DataDirs {
		args = append(args, "-data-dir", c.DataDir(n))
	}
	return append(args, c.cfg.Args...)
}

// DataDir is n's data directory with Config.DataDirs.
func (c *Cluster) DataDir(n *Node) string { return filepath.Join(c.cfg.Dir, "data", n.Name) }

// Node returns the node named name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Token is the management token of the cluster's nodes.
func (c *Cluster) Token() string { return c.token }

// Client returns an HTTP client for the nodes' management endpoints.
func (c *Cluster) Client() *http.Client { return cli.ManagementClient(2*time.Second, c.token) }

// Command returns a command of BinDir (bankload) with the cluster's
// environment, in a process group of its own so that a Ctrl-C reaches the
// caller, which stops it.
func (c *Cluster) Command(name string, args ...string) *exec.Cmd {
	return c.CommandIn(c.cfg.BinDir, name, args...)
}

// CommandIn is Command for a program in another directory (another
// version's build).
func (c *Cluster) CommandIn(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// SetGID makes cmd run with group ID gid (0: leave it as it is).
func SetGID(cmd *exec.Cmd, gid uint32) {
	if gid == 0 {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: gid}
}

// Logf writes a timeline line.
func (c *Cluster) Logf(format string, args ...any) {
	fmt.Fprintf(c.out, c.cfg.Prefix+": "+format+"\n", args...)
}

// Describe lists the nodes and their addresses.
func (c *Cluster) Describe() string {
	var parts []string
	for _, n := range c.Nodes {
		parts = append(parts, fmt.Sprintf("%s(group %s, rpc %s, mgmt %s)", n.Name, n.Group, n.RPC, n.Mgmt))
	}
	return strings.Join(parts, " ")
}

func (c *Cluster) start(n *Node) error {
	logf, err := os.OpenFile(filepath.Join(c.cfg.Dir, n.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.mu.Lock()
	bin := cmp.Or(n.binDir, c.cfg.BinDir)
	n.mu.Unlock()
	cmd := exec.Command(filepath.Join(bin, "banknode"), c.nodeArgs(n)...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.cfg.GID != nil {
		SetGID(cmd, c.cfg.GID(n))
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.started = cmd, exited, time.Now()
	n.mu.Unlock()
	return nil
}

// proc returns n's current process and its exit channel.
func (n *Node) proc() (*exec.Cmd, chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd, n.exited
}

// Pid returns the process ID of n's current process, if it was started.
func (n *Node) Pid() (int, bool) {
	cmd, _ := n.proc()
	if cmd == nil {
		return 0, false
	}
	return cmd.Process.Pid, true
}

// Started returns when n's current process started.
func (n *Node) Started() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.started
}

// RSS returns the resident memory of n's current process, from /proc
// where there is one.
func (n *Node) RSS() (kib int64, err error) {
	cmd, _ := n.proc()
	if cmd == nil {
		return 0, fmt.Errorf("%s was never started", n.Name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// CPUTime returns the CPU time n's current process has used, user and
// system, from /proc where there is one.
func (n *Node) CPUTime() (time.Duration, error) {
	cmd, _ := n.proc()
	if cmd == nil {
		return 0, fmt.Errorf("%s was never started", n.Name)
	}
	return testkit.ProcessCPUTime(cmd.Process.Pid)
}

// Running reports whether n's process is running (frozen counts).
func (n *Node) Running() bool {
	_, exited := n.proc()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Signal sends sig to n and notes it in the timeline.
func (c *Cluster) Signal(n *Node, sig syscall.Signal) error {
	cmd, _ := n.proc()
	if cmd == nil {
		return fmt.Errorf("%s was never started", n.Name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		c.Logf("%s %s: %v", sig, n.Name, err)
		return err
	}
	c.Logf("%-10s %s (group %s)", strings.ToUpper(sigName(sig)), n.Name, n.Group)
	return nil
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "sigkill"
	case syscall.SIGSTOP:
		return "sigstop"
	case syscall.SIGCONT:
		return "sigcont"
	case syscall.SIGTERM:
		return "sigterm"
	}
	return sig.String()
}

// Kill SIGKILLs n and waits until it is gone.
func (c *Cluster) Kill(n *Node) error {
	if err := c.Signal(n, syscall.SIGKILL); err != nil {
		return err
	}
	_, exited := n.proc()
	<-exited // SIGKILL cannot be caught: the wait is bounded
	return nil
}

// Terminate SIGTERMs n and waits for it to drain and exit, SIGKILLing it
// if it has not within timeout.
func (c *Cluster) Terminate(n *Node, timeout time.Duration) error {
	if err := c.Signal(n, syscall.SIGTERM); err != nil {
		return err
	}
	cmd, exited := n.proc()
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		c.Logf("%s did not exit %v after SIGTERM; killing it", n.Name, timeout)
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s did not exit within %v of SIGTERM", n.Name, timeout)
	}
}

// Restart starts n again, on the same ports, once its process is gone.
func (c *Cluster) Restart(n *Node) error {
	if n.Running() {
		return fmt.Errorf("restart %s: still running", n.Name)
	}
	if err := c.start(n); err != nil {
		return err
	}
	c.Logf("%-10s %s (group %s)", "START", n.Name, n.Group)
	return nil
}

// Ready reports whether n's /health/ready answers 200.
func (c *Cluster) Ready(n *Node) bool {
	resp, err := c.Client().Get("http://" + n.Mgmt + "/health/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady polls the nodes' /health/ready until each answers 200.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration, nodes ...*Node) error {
	deadline := time.Now().Add(timeout)
	for _, n := range nodes {
		for !c.Ready(n) {
			if !n.Running() {
				return fmt.Errorf("%s exited; see %s.log", n.Name, n.Name)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready after %v", n.Name, timeout)
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

// Close thaws and terminates every node still running, and kills those
// that do not exit within a few seconds.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if cmd, _ := n.proc(); cmd != nil && n.Running() {
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(10 * time.Second)
	for _, n := range c.Nodes {
		cmd, exited := n.proc()
		if exited == nil {
			continue
		}
		select {
		case <-exited:
		case <-deadline:
			cmd.Process.Kill()
			<-exited
		}
	}
}

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

// LockedWriter serializes writes: timelines and the output of processes,
// which os/exec copies on goroutines of its own, share one writer.
func LockedWriter(w io.Writer) io.Writer {
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
