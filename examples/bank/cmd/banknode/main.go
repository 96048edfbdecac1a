// Command banknode runs one node of the bank example: a fast-failover
// server for bank.Accounts over TCP, a member of a memberlist cluster, and
// the management HTTP endpoints, plus GET /bank/balances for audits.
//
// Every flag defaults to an environment variable; see the README or -h.
// The failover settings come from the FFGEN_* variables that
// runtime.SettingsFromEnv reads (FFGEN_HEARTBEAT_INTERVAL, ...).
//
// On SIGTERM or SIGINT the node stops taking work (clients fail over),
// leaves the cluster, lets running handlers finish and exits.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
)

const usage = `Runs one node of the bank example: the Accounts service over TCP,
memberlist gossip, and management HTTP with /bank/balances (beyond loopback
only with a token).
`

type config struct {
	name, group, groups           string
	rpc, advertise, gossip, seeds string
	mgmt, token, preset, key      string
	tlsCert, tlsKey, tlsCA        string
	plaintext                     bool
	logLevel                      string
	drain                         time.Duration
	remember                      int
}

func main() {
	f := cli.NewFlags("banknode", usage)
	var (
		name      = f.String("name", "FFGEN_NODE", "", "unique node name (required)")
		group     = f.String("group", "FFGEN_GROUP", "", "this node's failure group (required)")
		groups    = f.String("groups", runtime.EnvGroups, "", "every failure group, comma-separated, the same order on every node (required)")
		rpc       = f.String("rpc", "FFGEN_RPC_ADDR", "127.0.0.1:7600", "fast-failover listen address")
		advertise = f.String("rpc-advertise", "FFGEN_RPC_ADVERTISE", "", "fast-failover address published to others (default: the listen address; required when -rpc binds every interface)")
		tlsCert   = f.String("rpc-tls-cert", "FFGEN_RPC_TLS_CERT", "", "PEM certificate of the fast-failover listener (with -rpc-tls-key: TLS 1.3)")
		tlsKey    = f.String("rpc-tls-key", "FFGEN_RPC_TLS_KEY", "", "PEM private key of -rpc-tls-cert")
		tlsCA     = f.String("rpc-tls-ca", "FFGEN_RPC_TLS_CA", "", "PEM CA that client certificates must chain to (mutual TLS)")
		plaintext = f.Bool("rpc-plaintext", "FFGEN_RPC_PLAINTEXT", false, "allow -rpc beyond loopback without TLS: anyone who reaches the port can send writes")
		gossip    = f.String("gossip", "FFGEN_GOSSIP_ADDR", "127.0.0.1:7946", "memberlist bind address (UDP and TCP)")
		seeds     = f.String("seeds", "FFGEN_SEEDS", "", "gossip addresses of nodes to join, comma-separated (none: start a cluster)")
		mgmt      = f.String("mgmt", "FFGEN_MANAGEMENT_ADDR", cluster.DefaultManagementAddr, "management HTTP address; beyond loopback it needs -manage-token")
		token     = f.String("manage-token", cli.ManageTokenEnv, "", "bearer token required on every management request (prefer the variable: flags show in ps)")
		preset    = f.String("gossip-preset", "FFGEN_GOSSIP_PRESET", "lan", "memberlist timing: lan (dead after seconds) or local (about 1-2 s)")
		key       = f.String("gossip-key", "FFGEN_GOSSIP_KEY", "", "gossip encryption key, base64 of 16, 24 or 32 bytes")
		logLevel  = f.String("log-level", "FFGEN_LOG_LEVEL", "info", "debug, info, warn or error")
		drain     = f.Duration("drain", "FFGEN_DRAIN_TIMEOUT", 5*time.Second, "how long shutdown waits for running handlers")
		remember  = f.Int("remember", "FFGEN_REMEMBER_OPS", bank.DefaultRemember, "operation outcomes the ledger remembers for idempotency")
	)
	f.Parse(os.Args[1:])
	c := config{
		name: *name, group: *group, groups: *groups,
		rpc: *rpc, advertise: *advertise, gossip: *gossip, seeds: *seeds,
		mgmt: *mgmt, token: *token, preset: *preset, key: *key, logLevel: *logLevel,
		tlsCert: *tlsCert, tlsKey: *tlsKey, tlsCA: *tlsCA, plaintext: *plaintext,
		drain: *drain, remember: *remember,
	}
	ctx, stop, log := f.Start(c.logLevel)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("banknode failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.name == "" || c.group == "" {
		return errors.New("-name and -group are required")
	}
	settings, err := runtime.SettingsFromEnv(runtime.DefaultSettings())
	if err != nil {
		return err
	}
	if c.groups != "" {
		settings.Groups = cli.List(c.groups)
	}
	if err := settings.Validate(); err != nil {
		return err
	}
	if !slices.Contains(settings.Groups, c.group) {
		return fmt.Errorf("group %q is not one of -groups %q", c.group, settings.Groups)
	}
	ccfg, err := clusterConfig(c)
	if err != nil {
		return err
	}
	if err := cluster.CheckManagementAddr(c.mgmt, c.token, nil); err != nil {
		return fmt.Errorf("-mgmt: %w", err)
	}
	if err := checkAdvertise(c.rpc, c.advertise); err != nil {
		return err
	}
	serverTLS, err := cli.ServerTLS(c.tlsCert, c.tlsKey, c.tlsCA)
	if err != nil {
		return err
	}
	clusterLog := log // the cluster adds the node name itself
	log = log.With("node", c.name)

	ledger := bank.NewLedger(c.remember)
	stats := runtime.NewStats()
	tcp, err := transport.NewTCP(transport.TCPConfig{
		Config:         transport.Config{Node: c.name, Group: c.group, Logger: log},
		TLS:            serverTLS,
		AllowPlaintext: c.plaintext,
	})
	if err != nil {
		return err
	}
	stats.WatchTransport(tcp)
	srv := runtime.NewServer(runtime.ServerConfig{Settings: settings, Metrics: stats, Logger: log})
	if err := bank.RegisterAccountsServer(srv, ledger); err != nil {
		return err
	}
	ln, err := srv.Serve(tcp, c.rpc)
	if errors.Is(err, transport.ErrInsecureListen) {
		return fmt.Errorf("-rpc: %w (banknode: pass -rpc-tls-cert and -rpc-tls-key, with -rpc-tls-ca to require client certificates, or -rpc-plaintext)", err)
	}
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.rpc, err)
	}
	defer srv.Shutdown(context.Background())
	ccfg.RPCAddr = ln.Addr()
	if c.advertise != "" {
		ccfg.RPCAddr = c.advertise
	}
	ccfg.Services = srv.Services()
	ccfg.Logger = clusterLog
	cl, err := cluster.Start(ccfg)
	if err != nil {
		return err
	}
	defer cl.Shutdown()

	ms, err := cluster.ServeManagement(c.mgmt, management(c, settings.Groups, cl, stats, srv, ledger), nil)
	if err != nil {
		return err
	}
	defer ms.Shutdown(context.Background())

	log.Info("banknode serving", "group", c.group, "groups", settings.Groups, "rpc", ccfg.RPCAddr,
		"gossip", cl.LocalNode().GossipAddress, "mgmt", ms.Addr().String(), "mgmt_token", c.token != "", "seeds", ccfg.Seeds, "preset", c.preset)

	<-ctx.Done()
	log.Info("banknode stopping: refusing new work, leaving the cluster")
	ledger.SetBusy(true)
	if err := cl.Leave(cluster.DefaultLeaveTimeout); err != nil {
		log.Warn("leave failed", "err", err)
	}
	dctx, cancel := context.WithTimeout(context.Background(), c.drain)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		log.Warn("handlers still running at shutdown were cancelled", "err", err)
	}
	if err := cl.Shutdown(); err != nil {
		// Typically the leave broadcast found nobody left to tell.
		log.Warn("cluster shutdown", "err", err)
	}
	if err := ms.Shutdown(dctx); err != nil {
		log.Warn("management shutdown", "err", err)
	}
	log.Info("banknode stopped")
	return nil
}

// checkAdvertise refuses to publish a wildcard listen address, which peers
// cannot dial.
func checkAdvertise(rpc, advertise string) error {
	if advertise != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(rpc)
	if err != nil {
		return fmt.Errorf("-rpc %q: %w", rpc, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("-rpc %s binds every interface, an address peers cannot dial: set -rpc-advertise to the address they reach this node on", rpc)
	}
	return nil
}

// clusterConfig translates the gossip flags.
func clusterConfig(c config) (cluster.Config, error) {
	cfg, err := cli.ClusterConfig(c.preset)
	if err != nil {
		return cfg, err
	}
	host, port, err := net.SplitHostPort(c.gossip)
	if err != nil {
		return cfg, fmt.Errorf("-gossip %q: %w", c.gossip, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return cfg, fmt.Errorf("-gossip %q: bad port", c.gossip)
	}
	cfg.Name, cfg.Group = c.name, c.group
	cfg.BindAddr, cfg.BindPort = host, p
	cfg.Seeds = cli.List(c.seeds)
	if c.key != "" {
		k, err := base64.StdEncoding.DecodeString(c.key)
		if err != nil {
			return cfg, fmt.Errorf("-gossip-key: not base64: %w", err)
		}
		cfg.SecretKey = k
	}
	return cfg, nil
}

// management configures the management API: the cluster's routes plus
// the ledger report that bankload audits, all behind c.token if set.
func management(c config, groups []string, cl interface {
	cluster.MemberSource
	cluster.MemberOperator
}, stats *runtime.Stats, srv *runtime.Server, ledger *bank.Ledger) cluster.ManagementConfig {
	balances := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := cli.Report{Node: c.name, Group: c.group, InFlight: len(srv.InFlight()), Snapshot: ledger.Snapshot(r.URL.Query().Get("prefix"))}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
	return cluster.ManagementConfig{
		Members:  cl,
		Operator: cl,
		Metrics:  stats,
		Ops:      []runtime.InFlighter{srv},
		Groups:   groups,
		Token:    c.token,
		Routes:   map[string]http.Handler{"GET " + cli.BalancesPath: balances},
	}
}
