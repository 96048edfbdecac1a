package bank_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
)

var thinGroups = []string{"a", "b"}

// thinSettings are the defaults with room for a busy machine. This test is
// about routing, following the membership and failing over from a crashed
// node (a broken connection: at once); on two loaded cores under the race
// detector, a 200 ms heartbeat timeout, which also bounds a dial, and a
// 100 ms replication acknowledgement pass without any fault, and the
// operations that fail then say nothing about what is tested here. How
// fast a silent node is left is tested in fake time, in runtime.
func thinSettings() runtime.Settings {
	s := runtime.DefaultSettings()
	s.Groups = thinGroups
	s.HeartbeatTimeout, s.AttemptTimeout, s.OperationTimeout = 2*time.Second, 10*time.Second, 20*time.Second
	return s
}

// thinNode is one bank node as a process would run it: TCP server,
// memberlist gossip, management HTTP on loopback.
type thinNode struct {
	name string
	srv  *runtime.Server
	cl   *cluster.Cluster
	mgmt *cluster.ManagementServer
}

func startThinNode(t *testing.T, name, group string, seeds ...string) *thinNode {
	t.Helper()
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: group}})
	if err != nil {
		t.Fatal(err)
	}
	srv := runtime.NewServer(runtime.ServerConfig{Settings: thinSettings(), Node: name,
		Replication: runtime.ReplicationConfig{Voters: []string{"a1", "b1"}}})
	if err := bank.RegisterAccountsServer(srv, bank.NewLedger(0)); err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Serve(tcp, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cluster.DefaultLocalConfig()
	// The LAN preset's failure detector: the Local preset's 100 ms probe
	// timeout declared live nodes dead on a loaded machine, and the two
	// groups then each ran writes the other lost (the gamble a partition
	// is). This test is about thin clients following the membership, not
	// about how fast it notices a crash.
	cfg.Preset = cluster.PresetLAN
	cfg.Name, cfg.Group, cfg.RPCAddr, cfg.Services, cfg.Seeds = name, group, ln.Addr(), srv.Services(), seeds
	cfg.JoinRetryMin, cfg.JoinRetryMax = 20*time.Millisecond, 200*time.Millisecond
	cl, err := cluster.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.UseMembership(cl)
	ms, err := cluster.ServeManagement("127.0.0.1:0", cluster.ManagementConfig{Members: cl, Groups: thinGroups}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := &thinNode{name: name, srv: srv, cl: cl, mgmt: ms}
	t.Cleanup(n.kill)
	return n
}

func (n *thinNode) gossip() string { return n.cl.LocalNode().GossipAddress }
func (n *thinNode) addr() string   { return n.mgmt.Addr().String() }

// kill stops the node as a crash would: no leave message, connections
// and listeners gone.
func (n *thinNode) kill() {
	n.mgmt.Shutdown(context.Background())
	n.cl.Operate(n.name, cluster.OpDown)
	n.srv.Close()
}

type thinClient struct {
	follow *cluster.Follower
	accts  *bank.AccountsClient
}

func startThinClient(t *testing.T, i int, nodes []string) *thinClient {
	t.Helper()
	f, err := cluster.Follow(cluster.FollowConfig{Nodes: nodes, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: fmt.Sprintf("thin-%d", i)}})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: f, Settings: thinSettings()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return &thinClient{follow: f, accts: bank.NewAccountsClient(rc)}
}

// waitReady waits until the nodes' replicas have caught up, as their
// readiness probes would.
func waitReady(t *testing.T, nodes ...*thinNode) {
	t.Helper()
	for _, n := range nodes {
		testkit.Until(t, n.name+" ready", func() bool {
			for _, st := range n.srv.Replication() {
				if !st.Ready {
					return false
				}
			}
			return true
		})
	}
}

func memberNames(ms []runtime.Member) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func statusNames(ss []cluster.MemberStatus) []string {
	out := []string{}
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// eachClient runs fn for every client at once and fails on the first
// error.
func eachClient(t *testing.T, clients []*thinClient, fn func(i int, c *thinClient) error) {
	t.Helper()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { errs[i] = fn(i, c) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// Twenty thin clients route, fail over and follow joins and leaves, while
// the membership lists only the nodes.
func TestThinClientsFollowTheClusterWithoutJoiningIt(t *testing.T) {
	a1 := startThinNode(t, "a1", "a")
	b1 := startThinNode(t, "b1", "b", a1.gossip())
	nodes := []*thinNode{a1, b1}
	clients := make([]*thinClient, 20)
	for i := range clients {
		clients[i] = startThinClient(t, i, []string{a1.addr(), b1.addr()})
	}
	ctx := context.Background()
	waitFor := func(what string, want ...string) {
		t.Helper()
		testkit.Until(t, what, func() bool {
			for _, c := range clients {
				if !slices.Equal(memberNames(c.follow.Members()), want) {
					return false
				}
			}
			return true
		})
	}
	waitFor("every client sees a1 and b1", "a1", "b1")
	waitReady(t, a1, b1)

	// Every client opens an account and reads it back.
	ids := make([]string, len(clients))
	eachClient(t, clients, func(i int, c *thinClient) error {
		ids[i] = fmt.Sprintf("thin-%02d", i)
		if _, err := c.accts.Open(ctx, bank.OpenRequest{AccountID: ids[i], Initial: int32(100 + i)}); err != nil {
			return err
		}
		// The read may go to a follower, which runs the Open a network
		// delay after the client was answered: poll, with a bound.
		var err error
		testkit.Within(10*time.Second, func() bool {
			var b bank.Balance
			b, err = c.accts.Balance(ctx, ids[i])
			if err == nil && b.Amount != int64(100+i) {
				err = fmt.Errorf("balance %d, want %d", b.Amount, 100+i)
			}
			return !errors.Is(err, bank.ErrUnknownAccount)
		})
		return err
	})
	onlyNodes := func(want ...string) {
		t.Helper()
		for _, n := range nodes {
			if got := statusNames(n.cl.AllMembers()); !slices.Equal(got, want) {
				t.Errorf("%s lists %v, want only the nodes %v", n.name, got, want)
			}
		}
	}
	onlyNodes("a1", "b1")

	// A node joins: every client routes to it.
	a2 := startThinNode(t, "a2", "a", a1.gossip())
	nodes = append(nodes, a2)
	waitFor("every client sees a2 join", "a1", "a2", "b1")
	waitReady(t, a2)
	onlyNodes("a1", "a2", "b1")

	// a1 crashes. Clients reading the membership from a1 read it from b1,
	// every client's reads keep working (those of a1's accounts fail over)
	// and the clients follow a1's departure.
	a1.kill()
	eachClient(t, clients, func(i int, c *thinClient) error {
		b, err := c.accts.Balance(ctx, ids[(i+1)%len(ids)])
		if err == nil && b.Amount != int64(100+(i+1)%len(ids)) {
			err = fmt.Errorf("balance %d after a1's crash", b.Amount)
		}
		return err
	})
	waitFor("every client drops the crashed a1", "a2", "b1")
	for i, c := range clients {
		if src := c.follow.Source(); src != b1.addr() {
			t.Errorf("client %d reads the membership from %s, want b1 (%s), the only given node left", i, src, b1.addr())
		}
	}

	// The operator takes the dead a1 out of the ledger's raft group (on
	// the leader), as gossip never does: the voters are a2 and b1.
	testkit.Until(t, "a1 removed from the voters", func() bool {
		for _, n := range []*thinNode{a2, b1} {
			if n.srv.RemoveReplica(ctx, bank.AccountsDesc.Name, "a1") == nil {
				return true
			}
		}
		return false
	})

	// a2 leaves gracefully: its server leaves the raft group (b1 is all
	// it has left), then the node leaves the gossip, and the clients stop
	// routing to it.
	if err := a2.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a2.cl.Leave(cluster.DefaultLeaveTimeout); err != nil {
		t.Fatal(err)
	}
	waitFor("every client drops a2, which left", "b1")
	eachClient(t, clients, func(i int, c *thinClient) error {
		_, err := c.accts.Balance(ctx, ids[i])
		return err
	})
	if got := statusNames(b1.cl.AllMembers()); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
		t.Errorf("b1 lists %v, want the nodes only (a1 dead, a2 left)", got)
	}
}
