package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
)

func TestClusterConfig(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(make([]byte, 16))
	cfg, err := clusterConfig(config{name: "a1", group: "a", gossip: "127.0.0.1:7001", seeds: "h:1, h:2,", preset: "local", key: key})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "a1" || cfg.Group != "a" || cfg.BindAddr != "127.0.0.1" || cfg.BindPort != 7001 ||
		!slices.Equal(cfg.Seeds, []string{"h:1", "h:2"}) || len(cfg.SecretKey) != 16 || cfg.Preset != cluster.PresetLocal {
		t.Fatalf("config = %+v", cfg)
	}
	for adv, want := range map[string]string{"10.1.2.3": "10.1.2.3:7001", "10.1.2.3:7999": "10.1.2.3:7999"} {
		cfg, err := clusterConfig(config{gossip: "0.0.0.0:7001", gossipAdvertise: adv, preset: "lan"})
		if got := net.JoinHostPort(cfg.AdvertiseAddr, fmt.Sprint(cfg.AdvertisePort)); err != nil || got != want {
			t.Errorf("-gossip-advertise %s: %s, %v; want %s", adv, got, err, want)
		}
	}
	for _, bad := range []config{
		{gossip: "0.0.0.0:1", gossipAdvertise: "pod-name", preset: "lan"},
		{gossip: "0.0.0.0:1", gossipAdvertise: "10.0.0.1:x", preset: "lan"},
		{gossip: "nohost", preset: "lan"},
		{gossip: "127.0.0.1:x", preset: "lan"},
		{gossip: "127.0.0.1:1", preset: "wan"},
		{gossip: "127.0.0.1:1", preset: "lan", key: "!!"},
	} {
		if _, err := clusterConfig(bad); err == nil {
			t.Errorf("clusterConfig(%+v) accepted", bad)
		}
	}
}

type fakeCluster struct{}

func (fakeCluster) AllMembers() []cluster.MemberStatus {
	return []cluster.MemberStatus{{Name: "a1", Group: "a", State: cluster.StateAlive, Local: true}}
}
func (fakeCluster) Joined() bool { return true }
func (fakeCluster) Member(string) (cluster.MemberStatus, bool) {
	return cluster.MemberStatus{}, false
}
func (fakeCluster) Operate(string, cluster.Operation) error { return cluster.ErrNotLocal }

// The balances report is served beside the cluster's routes, on any
// address once a token guards them.
func TestManagementServesBalancesBehindToken(t *testing.T) {
	ledger := bank.NewLedger(16)
	if _, err := ledger.Open(context.Background(), bank.OpenRequest{AccountID: "run-a", Initial: 70}); err != nil {
		t.Fatal(err)
	}
	srv := runtime.NewServer(runtime.ServerConfig{})
	c := config{name: "a1", group: "a", token: "s3cret"}
	cfg := management(c, []string{"a"}, fakeCluster{}, cluster.NewStats(), srv, ledger)

	ms, err := cluster.ServeManagement("0.0.0.0:0", cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Shutdown(context.Background())
	addr := fmt.Sprintf("127.0.0.1:%d", ms.Addr().(*net.TCPAddr).Port)

	r, err := cli.FetchReport(context.Background(), cli.ManagementClient(5*time.Second, c.token), addr, "run-")
	if err != nil {
		t.Fatal(err)
	}
	if r.Node != "a1" || r.Group != "a" || r.Balances["run-a"] != 70 || len(r.Balances) != 1 {
		t.Fatalf("report = %+v", r)
	}
	if _, err := cli.FetchReport(context.Background(), cli.ManagementClient(5*time.Second, ""), addr, "run-"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("report without the token: %v, want 401", err)
	}
	j, err := cli.FetchJournal(context.Background(), cli.ManagementClient(5*time.Second, c.token), addr)
	if err != nil || j.Node != "a1" || j.Capacity != bank.DefaultJournal {
		t.Fatalf("journal = %+v, %v", j, err)
	}
	if _, err := cli.FetchJournal(context.Background(), cli.ManagementClient(5*time.Second, ""), addr); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("journal without the token: %v, want 401", err)
	}
	resp, err := cli.ManagementClient(5*time.Second, c.token).Get("http://" + addr + "/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health/ready: %s", resp.Status)
	}

	// Without a token the same address is refused.
	c.token = ""
	if _, err := cluster.ServeManagement("0.0.0.0:0", management(c, []string{"a"}, fakeCluster{}, cluster.NewStats(), srv, ledger), nil); !errors.Is(err, cluster.ErrInsecureManagement) {
		t.Fatalf("no token beyond loopback: %v, want ErrInsecureManagement", err)
	}
}

// A management address beyond loopback without a token stops the node
// before it listens or joins anything.
func TestRunRefusesInsecureManagement(t *testing.T) {
	c := config{name: "a1", group: "a", groups: "a,b", voters: "a1", gossip: "127.0.0.1:0", preset: "local", mgmt: "0.0.0.0:0"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // were it to start, it would stop at once
	if err := run(ctx, c, slog.New(slog.DiscardHandler)); !errors.Is(err, cluster.ErrInsecureManagement) {
		t.Fatalf("run = %v, want ErrInsecureManagement", err)
	}
}

// The port that takes writes is at least as careful as the management
// port: beyond loopback it needs TLS or an explicit opt-out, and a wildcard
// bind needs an address to publish. Each refusal says what to pass.
func TestRunRefusesUnsafeRPCAddress(t *testing.T) {
	base := config{name: "a1", group: "a", groups: "a,b", voters: "a1", gossip: "127.0.0.1:0", preset: "local", mgmt: "127.0.0.1:0"}
	tests := []struct {
		name    string
		edit    func(*config)
		wantIs  error
		wantMsg string
	}{
		{"plaintext beyond loopback", func(c *config) { c.rpc, c.advertise = "0.0.0.0:0", "192.0.2.1:7600" },
			transport.ErrInsecureListen, "-rpc-tls-cert and -rpc-tls-key"},
		{"wildcard without advertise", func(c *config) { c.rpc, c.plaintext = "0.0.0.0:0", true },
			nil, "set -rpc-advertise"},
		{"empty host without advertise", func(c *config) { c.rpc, c.plaintext = ":7600", true },
			nil, "set -rpc-advertise"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := run(ctx, c, slog.New(slog.DiscardHandler))
			if err == nil || tt.wantIs != nil && !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("run = %v, want an error mentioning %q", err, tt.wantMsg)
			}
		})
	}
}
