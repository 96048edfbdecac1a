package pagetest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The test binary doubles as a cluster node: run with nodeEnv set, it
// serves one node until its standard input closes, so that a node can be
// killed for real (SIGKILL) and never outlives the test.
const (
	nodeEnv  = "PAGETEST_NODE" // name,group
	seedsEnv = "PAGETEST_SEEDS"
	tokenEnv = "PAGETEST_TOKEN"
	loadEnv  = "PAGETEST_LOAD" // set: this node also sends a steady load
)

var groups = []string{"a", "b"}

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		if err := runNode(spec); err != nil {
			fmt.Fprintln(os.Stderr, "pagetest node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nodeAddrs is what a node prints on its first line of output.
type nodeAddrs struct {
	Mgmt   string `json:"mgmt"`
	Gossip string `json:"gossip"`
}

// runNode serves a bank node with a client and management on loopback,
// each on a free port, with the local gossip preset.
func runNode(spec string) error {
	name, group, ok := strings.Cut(spec, ",")
	if !ok {
		return fmt.Errorf("%s=%q: want name,group", nodeEnv, spec)
	}
	settings := runtime.DefaultSettings()
	settings.Groups = groups
	// No cluster.Stats anywhere: the page must show what the node served
	// and the failovers its clients saw from what every node counts.
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: group}})
	if err != nil {
		return err
	}
	// bank.Accounts is replicated: a1, a2 and b2 form its raft group, and
	// b1, the node the test kills, joins it as a learner.
	srv := runtime.NewServer(runtime.ServerConfig{Settings: settings, Node: name,
		Replication: runtime.ReplicationConfig{Voters: []string{"a1", "a2", "b2"}}})
	if err := bank.RegisterAccountsServer(srv, bank.NewLedger(0)); err != nil {
		return err
	}
	ln, err := srv.Serve(tcp, "127.0.0.1:0")
	if err != nil {
		return err
	}
	cfg := cluster.DefaultLocalConfig()
	cfg.Name, cfg.Group = name, group
	cfg.RPCAddr, cfg.Services = ln.Addr(), srv.Services()
	if s := os.Getenv(seedsEnv); s != "" {
		cfg.Seeds = strings.Split(s, ",")
	}
	cfg.Ready = srv.Ready
	cl, err := cluster.Start(cfg)
	if err != nil {
		return err
	}
	srv.UseMembership(cl)
	client, err := runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: cl, Settings: settings})
	if err != nil {
		return err
	}
	// The reads go through a client that never writes: one that knows the
	// leader from its writes sends its linearizable reads there, and then
	// this node would serve none of them, nor would b1's death cost any a
	// failover.
	reader, err := runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: cl, Settings: settings})
	if err != nil {
		return err
	}
	ms, err := cluster.ServeManagement("127.0.0.1:0", cluster.ManagementConfig{
		Members:  cl,
		Ops:      []runtime.InFlighter{client, reader, srv},
		Replicas: srv,
		Groups:   groups,
		Token:    os.Getenv(tokenEnv),
	}, nil)
	if err != nil {
		return err
	}
	line, _ := json.Marshal(nodeAddrs{Mgmt: ms.Addr().String(), Gossip: cl.LocalNode().GossipAddress})
	fmt.Printf("%s\n", line)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if os.Getenv(loadEnv) != "" {
		wg.Go(func() { load(ctx, cl, bank.NewAccountsClient(client), bank.NewAccountsClient(reader)) })
	}
	io.Copy(io.Discard, os.Stdin) // until the test ends or dies
	cancel()
	wg.Wait()
	reader.Close()
	client.Close()
	srv.Close()
	return cl.Shutdown()
}

// load sends a few dozen reads and writes a second, enough for the page to
// show rates, once all four nodes are members. The writes are replicated:
// a node that restarts catches up before it serves.
func load(ctx context.Context, cl *cluster.Cluster, a, reads *bank.AccountsClient) {
	for len(cl.Members()) < 4 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	ids := make([]string, 16)
	for i := range ids {
		ids[i] = fmt.Sprintf("acct-%02d", i)
		// The service's raft group may not have elected its leader yet:
		// an Open refused for that ran nowhere, and is tried again.
		for {
			_, err := a.Open(ctx, bank.OpenRequest{AccountID: ids[i], Initial: 1000})
			if err == nil || errors.Is(err, bank.ErrAccountExists) || ctx.Err() != nil {
				break
			}
			if runtime.MaybeExecuted(err) {
				fmt.Fprintln(os.Stderr, "pagetest load: open:", err)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id := ids[i%len(ids)]
		if i%5 == 0 {
			a.Deposit(ctx, bank.DepositRequest{AccountID: id, Amount: 1})
		} else {
			reads.Balance(ctx, id)
		}
	}
}

// node is one node process started by the test.
type node struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addrs nodeAddrs
	done  chan struct{}
}

// startNode starts a node process and waits for its addresses; the node
// stops when the test ends.
func startNode(t *testing.T, name, group, token string, seeds []string, withLoad bool) *node {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		nodeEnv+"="+name+","+group,
		seedsEnv+"="+strings.Join(seeds, ","),
		tokenEnv+"="+token,
	)
	if withLoad {
		cmd.Env = append(cmd.Env, loadEnv+"=1")
	}
	cmd.Stderr = &prefixWriter{t: t, prefix: name + ": "}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { cmd.Wait(); close(n.done) }()
	t.Cleanup(n.kill)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("node %s exited before serving", name)
		}
		if err := json.Unmarshal([]byte(line), &n.addrs); err != nil {
			t.Fatalf("node %s: first line %q: %v", name, line, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("node %s did not start within 60 s", name)
	}
	return n
}

// kill ends the process at once, as a crash does, and waits for it.
func (n *node) kill() {
	n.cmd.Process.Kill()
	n.stdin.Close()
	<-n.done
}

// prefixWriter passes a node's log lines to the test log.
type prefixWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.t.Log(w.prefix + string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
