// Package fftest builds in-memory clusters for tests of services built on
// the runtime: every node is a runtime.Server on an in-memory Network, the
// membership is static, and the network's faults (pause, cut, reset, delay,
// drop) are at hand. Create a Cluster inside a testing/synctest bubble for
// deterministic timing; it closes itself through t.Cleanup.
package fftest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/memnet"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Config shapes a Cluster.
type Config struct {
	// Groups are the failure groups; default "a", "b".
	Groups []string
	// PerGroup is the number of nodes in each group; default 1. Nodes are
	// named after their group and a number: a1, a2, b1, …
	PerGroup int
	// Settings for clients and servers: the zero value means
	// runtime.DefaultSettings(); anything else is used as it is (so a test
	// can set MaxFailovers or SuspectFor to zero). Groups is always set
	// from Config.Groups.
	Settings runtime.Settings
	// Logger defaults to one that discards, to keep test output readable,
	// except the report of a bug in the engine (an execution event its
	// state does not allow), which fails the test.
	Logger *slog.Logger
	// Replication configures the raft groups of replicated services. Its
	// Voters default to every node of the cluster.
	Replication runtime.ReplicationConfig
	// Server, if set, adjusts each node's server config (interceptors,
	// metrics) before the server is made, on restarts too.
	Server func(node string, cfg *runtime.ServerConfig)
}

// Cluster is an in-memory cluster.
type Cluster struct {
	Net         *Network
	Members     *runtime.StaticMembership
	Settings    runtime.Settings
	Nodes       []*Node
	logger      *slog.Logger
	clients     int
	served      []served
	replication runtime.ReplicationConfig
	serverCfg   func(node string, cfg *runtime.ServerConfig)
}

// Node is one server of the cluster.
type Node struct {
	Name, Group string
	Server      *runtime.Server
	tr          *memnet.Transport
	services    []string
}

// New starts a cluster with no services; call Serve to register some.
func New(tb testing.TB, cfg Config) *Cluster {
	tb.Helper()
	if len(cfg.Groups) == 0 {
		cfg.Groups = []string{"a", "b"}
	}
	if cfg.PerGroup <= 0 {
		cfg.PerGroup = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Logger(tb)
	}
	s := withDefaults(cfg.Settings)
	s.Groups = cfg.Groups
	if err := s.Validate(); err != nil {
		tb.Fatalf("fftest: settings: %v", err)
	}
	c := &Cluster{
		Net:         NewNetwork(),
		Members:     runtime.NewStaticMembership(),
		Settings:    s,
		logger:      cfg.Logger,
		replication: cfg.Replication,
		serverCfg:   cfg.Server,
	}
	if len(c.replication.Voters) == 0 {
		// Every node votes, as a cluster started together would list.
		for _, g := range cfg.Groups {
			for i := 1; i <= cfg.PerGroup; i++ {
				c.replication.Voters = append(c.replication.Voters, fmt.Sprintf("%s%d", g, i))
			}
		}
	}
	for _, g := range cfg.Groups {
		for i := 1; i <= cfg.PerGroup; i++ {
			name := fmt.Sprintf("%s%d", g, i)
			t := c.Net.n.Transport(transport.Config{Node: name, Group: g, Logger: cfg.Logger})
			srv := c.newServer(name)
			if _, err := srv.Serve(t, name); err != nil {
				tb.Fatalf("fftest: node %s: %v", name, err)
			}
			c.Nodes = append(c.Nodes, &Node{Name: name, Group: g, Server: srv, tr: t})
		}
	}
	tb.Cleanup(c.Close)
	return c
}

func (c *Cluster) newServer(name string) *runtime.Server {
	cfg := runtime.ServerConfig{Settings: c.Settings, Logger: c.logger, Membership: c.Members, Node: name, Replication: c.replication}
	if c.serverCfg != nil {
		c.serverCfg(name, &cfg)
	}
	return runtime.NewServer(cfg)
}

// withDefaults returns the defaults for zero settings, and s itself
// otherwise: a test that sets anything sets everything (start from
// runtime.DefaultSettings), so it can also switch things off with zeros.
func withDefaults(s runtime.Settings) runtime.Settings {
	if s.HeartbeatInterval == 0 && s.HeartbeatTimeout == 0 && s.AttemptTimeout == 0 &&
		s.OperationTimeout == 0 && s.MaxFailovers == 0 && s.SuspectFor == 0 &&
		s.Budget == (runtime.BudgetSettings{}) {
		return runtime.DefaultSettings()
	}
	return s
}

// Serve registers svc on every node, with the implementation impl returns
// for that node, and announces the nodes as serving it.
func (c *Cluster) Serve(tb testing.TB, svc *runtime.ServiceDesc, impl func(n *Node) any) {
	tb.Helper()
	c.ServeVersions(tb, func(*Node) *runtime.ServiceDesc { return svc }, impl)
}

// ServeVersions is Serve with the version of the service each node
// serves: desc returns it for a node (the same Name for every node), as
// a cluster in the middle of a rollout runs several. It is asked again
// when a node starts (Start, Restart): a test upgrades a node by
// returning the newer version and restarting it.
func (c *Cluster) ServeVersions(tb testing.TB, desc func(n *Node) *runtime.ServiceDesc, impl func(n *Node) any) {
	tb.Helper()
	for _, n := range c.Nodes {
		svc := desc(n)
		if err := n.Server.Register(svc, impl(n)); err != nil {
			tb.Fatalf("fftest: register %s on %s: %v", svc.Name, n.Name, err)
		}
		n.services = append(n.services, svc.Name)
	}
	c.served = append(c.served, served{desc, impl})
	c.announce()
	c.WaitReady(tb)
}

// WaitConverged waits until the named nodes (every node if none is named)
// are ready and have run every write committed among them, polling (no
// event says so); then they hold the same state. In a synctest bubble the
// polls cost no real time.
func (c *Cluster) WaitConverged(tb testing.TB, names ...string) {
	tb.Helper()
	nodes := c.Nodes
	if len(names) > 0 {
		nodes = nil
		for _, name := range names {
			nodes = append(nodes, c.Node(name))
		}
	}
	var why string
	if !testkit.Within(testkit.Bound, func() bool { why = converged(nodes); return why == "" }) {
		for _, n := range c.Nodes {
			tb.Logf("%s: %+v", n.Name, n.Server.Replication())
		}
		tb.Fatalf("fftest: replicas did not converge: %s", why)
	}
}

func converged(nodes []*Node) string {
	commit := map[string]uint64{}
	for _, n := range nodes {
		for _, st := range n.Server.Replication() {
			commit[st.Service] = max(commit[st.Service], st.Commit)
		}
	}
	for _, n := range nodes {
		for _, st := range n.Server.Replication() {
			switch {
			case !st.Ready:
				return fmt.Sprintf("%s: %s not ready: %s", n.Name, st.Service, st.NotReady)
			case st.Applied < commit[st.Service]:
				return fmt.Sprintf("%s: %s applied %d of %d", n.Name, st.Service, st.Applied, commit[st.Service])
			}
		}
	}
	return ""
}

type served struct {
	desc func(n *Node) *runtime.ServiceDesc
	impl func(n *Node) any
}

// Restart replaces a node as a crash and restart would: its server and
// transport are closed, and a new server serves the same services (impl is
// called again) at the same address: empty, unless its ServerConfig has a
// DataDir. The membership keeps listing it, as memberlist would for a node
// that came back within its timeouts.
func (c *Cluster) Restart(tb testing.TB, name string) *Node {
	tb.Helper()
	c.Kill(tb, name)
	return c.Start(tb, name)
}

// Kill stops a node as kill -9 would: its server and transport close at
// once. Start brings it back.
func (c *Cluster) Kill(tb testing.TB, name string) {
	tb.Helper()
	n := c.Node(name)
	if n == nil {
		tb.Fatalf("fftest: no node %s", name)
	}
	n.Server.Close()
	n.tr.Close()
}

// Start starts a node that Kill stopped: a new server and transport at the
// same address, serving the same services.
func (c *Cluster) Start(tb testing.TB, name string) *Node {
	tb.Helper()
	n := c.Node(name)
	if n == nil {
		tb.Fatalf("fftest: no node %s", name)
	}
	n.tr = c.Net.n.Transport(transport.Config{Node: name, Group: n.Group, Logger: c.logger})
	n.Server = c.newServer(name)
	if _, err := n.Server.Serve(n.tr, name); err != nil {
		tb.Fatalf("fftest: start %s: %v", name, err)
	}
	for _, s := range c.served {
		svc := s.desc(n)
		if err := n.Server.Register(svc, s.impl(n)); err != nil {
			tb.Fatalf("fftest: register %s on %s: %v", svc.Name, name, err)
		}
	}
	// Its version of the services may have changed (ServeVersions): the
	// membership says so, as the node's new metadata would.
	ms := slices.Clone(c.Members.Members())
	for i := range ms {
		if ms[i].Name == name && !maps.EqualFunc(ms[i].Methods, n.Server.Methods(), slices.Equal) {
			ms[i].Methods = n.Server.Methods()
			c.Members.Set(ms)
			break
		}
	}
	return n
}

// WaitReady waits until every node has caught up on every
// replicated service (see runtime.Server.Ready), polling (no event says
// so); in a synctest bubble the polls cost no real time.
func (c *Cluster) WaitReady(tb testing.TB) {
	tb.Helper()
	var notReady error
	ready := func() bool {
		for _, n := range c.Nodes {
			if err := n.Server.Ready(); err != nil {
				notReady = fmt.Errorf("%s: %w", n.Name, err)
				return false
			}
		}
		return true
	}
	if !testkit.Within(testkit.Bound, ready) {
		tb.Fatalf("fftest: replicas not ready: %v", notReady)
	}
}

// Leader waits until a node leads service's raft group and returns its
// name, polling (no event says so).
func (c *Cluster) Leader(tb testing.TB, service string) string {
	tb.Helper()
	var leader string
	leading := func() bool {
		for _, n := range c.Nodes {
			for _, st := range n.Server.Replication() {
				if st.Service == service && st.Leading {
					leader = n.Name
					return true
				}
			}
		}
		return false
	}
	if !testkit.Within(testkit.Bound, leading) {
		tb.Fatalf("fftest: no node leads %s", service)
	}
	return leader
}

func (c *Cluster) announce() {
	ms := make([]runtime.Member, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		ms = append(ms, n.Member())
	}
	c.Members.Set(ms)
}

// Member is the node as the membership lists it.
func (n *Node) Member() runtime.Member {
	return runtime.Member{Name: n.Name, Group: n.Group, Addr: n.Name, Services: append([]string(nil), n.services...),
		Methods: n.Server.Methods()}
}

// Owners returns the nodes an operation of service on entity is sent to,
// in the order a client tries them: the entity's owner in each failure
// group, groups in the entity's order, as routing alone decides it (a
// client passes over the nodes it suspects). A group with no node serving
// service is left out.
func (c *Cluster) Owners(service, entity string) []string {
	var out []string
	for _, m := range runtime.Route(c.Settings.Groups, c.Members.Members(), service, entity) {
		out = append(out, m.Name)
	}
	return out
}

// Node returns the named node, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Client returns a new client on its own node of the network ("client1",
// "client2", …), closed with the cluster. modify, if given, adjusts its
// config first.
func (c *Cluster) Client(tb testing.TB, modify ...func(*runtime.ClientConfig)) *runtime.Client {
	tb.Helper()
	c.clients++
	name := fmt.Sprintf("client%d", c.clients)
	cfg := runtime.ClientConfig{
		Transport:  c.Net.Transport(transport.Config{Node: name, Group: "clients", Logger: c.logger}),
		Membership: c.Members,
		Settings:   c.Settings,
		Logger:     c.logger,
	}
	for _, m := range modify {
		m(&cfg)
	}
	cl, err := runtime.NewClient(cfg)
	if err != nil {
		tb.Fatalf("fftest: client: %v", err)
	}
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Crash takes a node out of the network for good: its connections reset
// and dials to it are refused. The membership still lists it, as a real
// membership would until it declares the node dead.
func (c *Cluster) Crash(name string) {
	if n := c.Node(name); n != nil {
		n.tr.Close()
	}
}

// Close shuts every server down and tears the network down.
func (c *Cluster) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		n.Server.Shutdown(ctx)
	}
	c.Net.Close()
}
