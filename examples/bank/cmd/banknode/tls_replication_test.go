package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

// Two nodes that serve mutual TLS replicate to each other over it: a write
// sent to one is applied on both, and each becomes ready (which it only
// does once it has compared its log with its peer over TLS).
func TestTLSNodesReplicateToEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	// One certificate for 127.0.0.1 serves both nodes, as server and
	// client certificate, and is the CA that trusts it.
	cert, key := testkit.WritePEM(t, testkit.SelfSigned(t))
	ports := testkit.FreePorts(t, 6)
	addr := func(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i])) }
	node := func(name, group string, rpc, gossip, mgmt int, seeds string) config {
		return config{name: name, group: group, groups: "a,b", voters: "a1,b1", rpc: addr(rpc), gossip: addr(gossip), mgmt: addr(mgmt),
			seeds: seeds, preset: "local", logLevel: "error", drain: time.Second, remember: 16, journal: 16,
			tlsCert: cert, tlsKey: key, tlsCA: cert}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for _, c := range []config{node("a1", "a", 0, 1, 2, ""), node("b1", "b", 3, 4, 5, addr(1))} {
		go func() { done <- run(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("node: %v", err)
			}
		}
	}()
	hc := cli.ManagementClient(2*time.Second, "")
	for _, mgmt := range []string{addr(2), addr(5)} {
		waitReady(t, hc, mgmt)
	}

	clientTLS, err := cli.ClientTLS(cert, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "client"}, ClientTLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	settings := runtime.DefaultSettings()
	settings.Groups = []string{"a", "b"}
	// The client dials within the heartbeat timeout, and a TLS handshake
	// under the race detector on a loaded machine can take longer than
	// the default 200 ms: this test is about TLS between the nodes, not
	// about how fast a silent node is left.
	settings.HeartbeatTimeout, settings.AttemptTimeout, settings.OperationTimeout = 2*time.Second, 10*time.Second, 20*time.Second
	members := runtime.NewStaticMembership(
		runtime.Member{Name: "a1", Group: "a", Addr: addr(0), Services: []string{bank.AccountsDesc.Name}},
		runtime.Member{Name: "b1", Group: "b", Addr: addr(3), Services: []string{bank.AccountsDesc.Name}},
	)
	rc, err := runtime.NewClient(runtime.ClientConfig{Transport: tp, Membership: members, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := bank.NewAccountsClient(rc).Open(ctx, bank.OpenRequest{AccountID: "tls-x", Initial: 42}); err != nil {
		t.Fatalf("Open over TLS: %v", err)
	}
	for _, mgmt := range []string{addr(2), addr(5)} {
		var r cli.Report
		var err error
		if !testkit.Within(20*time.Second, func() bool {
			r, err = cli.FetchReport(ctx, hc, mgmt, "tls-")
			return err == nil && r.Balances["tls-x"] == 42
		}) {
			t.Fatalf("%s never applied the write: %+v, %v", mgmt, r, err)
		}
	}
}

func waitReady(t *testing.T, hc *http.Client, mgmt string) {
	t.Helper()
	var err error
	ready := func() bool {
		var resp *http.Response
		if resp, err = hc.Get("http://" + mgmt + "/health/ready"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if !testkit.Within(30*time.Second, ready) {
		t.Fatalf("%s not ready: %v", mgmt, err)
	}
}
