// Command banknode runs one node of the bank example: a fast-failover
// server for bank.Accounts over TCP, a member of a memberlist cluster, and
// the management HTTP endpoints, plus GET /bank/balances and
// GET /bank/journal for audits.
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
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

const usage = `Runs one node of the bank example: the Accounts service over TCP,
memberlist gossip, and management HTTP with /bank/balances (beyond loopback
only with a token).
`

type config struct {
	name, group, groups           string
	rpc, advertise, gossip, seeds string
	gossipAdvertise               string
	mgmt, token, preset, key      string
	tlsCert, tlsKey, tlsCA        string
	plaintext, healthPublic       bool
	manageWrite                   bool
	logLevel                      string
	drain                         time.Duration
	remember, journal             int
	voters                        string
	tieBreaker                    bool
	dataDir, clusterName          string
	noFsync                       bool
	segmentBytes                  int
	queueDelay                    time.Duration
}

func main() {
	f := cli.NewFlags("banknode", usage)
	parsed := defineFlags(f)
	f.Parse(os.Args[1:])
	c := parsed()
	ctx, stop, log := f.Start(c.logLevel)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("banknode failed", "err", err)
		os.Exit(1)
	}
}

// defineFlags defines banknode's flags on f and returns the function
// that reads them once parsed.
func defineFlags(f *cli.Flags) func() config {
	var (
		name      = f.String("name", "FFGEN_NODE", "", "unique node name (required)")
		group     = f.String("group", "FFGEN_GROUP", "", "this node's failure group (required), e.g. its zone")
		groups    = f.String("groups", runtime.EnvGroups, "", "every failure group, comma-separated, the same order on every node (required)")
		rpc       = f.String("rpc", "FFGEN_RPC_ADDR", "127.0.0.1:7600", "fast-failover listen address")
		advertise = f.String("rpc-advertise", "FFGEN_RPC_ADVERTISE", "", "fast-failover address published to others (default: the listen address; required when -rpc binds every interface)")
		tlsCert   = f.String("rpc-tls-cert", "FFGEN_RPC_TLS_CERT", "", "PEM certificate of the fast-failover listener (with -rpc-tls-key: TLS 1.3)")
		tlsKey    = f.String("rpc-tls-key", "FFGEN_RPC_TLS_KEY", "", "PEM private key of -rpc-tls-cert")
		tlsCA     = f.String("rpc-tls-ca", "FFGEN_RPC_TLS_CA", "", "PEM CA that client certificates must chain to (mutual TLS)")
		plaintext = f.Bool("rpc-plaintext", "FFGEN_RPC_PLAINTEXT", false, "allow -rpc beyond loopback without TLS: anyone who reaches the port can send writes")
		gossip    = f.String("gossip", "FFGEN_GOSSIP_ADDR", "127.0.0.1:7946", "memberlist bind address (UDP and TCP)")
		gossipAdv = f.String("gossip-advertise", "FFGEN_GOSSIP_ADVERTISE", "", "gossip address published to others, host or host:port (default: derived from -gossip; set it when -gossip binds every interface)")
		seeds     = f.String("seeds", "FFGEN_SEEDS", "", "gossip addresses of nodes to join, comma-separated: host:port, dns+name:port (A/AAAA) or dnssrv+_svc._tcp.name (SRV), resolved again at every attempt (none: start a cluster)")
		mgmt      = f.String("mgmt", "FFGEN_MANAGEMENT_ADDR", cluster.DefaultManagementAddr, "management HTTP address; beyond loopback it needs -manage-token")
		token     = f.String("manage-token", cli.ManageTokenEnv, "", "bearer token required on every management request (prefer the variable: flags show in ps)")
		health    = f.Bool("health-public", "FFGEN_HEALTH_PUBLIC", false, "serve /health/alive and /health/ready without the token, for probes that cannot send it")
		mWrite    = f.Bool("manage-write", "FFGEN_MANAGE_WRITE", false, "let the management API change the cluster: a member's leave or down, a node's removal from the ledger's raft group (DELETE /cluster/replicas/{service}/voters/{name} on the leader)")
		preset    = f.String("gossip-preset", "FFGEN_GOSSIP_PRESET", "lan", "memberlist timing: lan (dead after seconds) or local (about 1-2 s)")
		key       = f.String("gossip-key", "FFGEN_GOSSIP_KEY", "", "gossip encryption key, base64 of 16, 24 or 32 bytes")
		logLevel  = f.String("log-level", "FFGEN_LOG_LEVEL", "info", "debug, info, warn or error")
		drain     = f.Duration("drain", "FFGEN_DRAIN_TIMEOUT", 5*time.Second, "how long shutdown waits for running handlers")
		remember  = f.Int("remember", "FFGEN_REMEMBER_OPS", bank.DefaultRemember, "operation outcomes the ledger remembers for idempotency")
		journal   = f.Int("journal", "FFGEN_JOURNAL_OPS", bank.DefaultJournal, "executed writes the ledger journals for audits (0: none)")
		voters    = f.String("voters", "FFGEN_VOTERS", "", "the nodes whose votes replicate the ledger, comma-separated, the same list on every node (required): the cluster forms once each has started; other nodes join as learners")
		tieBreak  = f.Bool("tiebreaker", "FFGEN_TIEBREAKER", false, "this node only votes: it never leads and serves no calls; its -group is a third location, not one of -groups")
		dataDir   = f.String("data-dir", "FFGEN_DATA_DIR", "", "directory of the ledger's replicated state, so that the node and the whole cluster restart with every acknowledged write (empty: memory only, lost when every node stops)")
		noFsync   = f.Bool("unsafe-no-fsync", "FFGEN_UNSAFE_NO_FSYNC", false, "acknowledge writes before the disk has them: a power cut of a majority of the voters at once can lose acknowledged writes")
		segment   = f.Int("wal-segment-bytes", "FFGEN_WAL_SEGMENT_BYTES", 0, "size of each log segment in -data-dir, allocated whole as it is begun (0: etcd's 64 MB); a smaller one takes less disk up front")
		clusterNm = f.String("cluster-name", "FFGEN_CLUSTER_NAME", "bank", "the cluster's name, kept in -data-dir: a directory of another cluster is refused")
		qDelay    = f.Duration("queue-delay", "FFGEN_QUEUE_DELAY", 0, "the queue the node lets stand beyond its unloaded wait to start before it refuses work (ServerConfig.QueueDelay; 0: off; "+runtime.SuggestedQueueDelay.String()+" suggested against overload)")
	)
	return func() config {
		return config{
			name: *name, group: *group, groups: *groups,
			rpc: *rpc, advertise: *advertise, gossip: *gossip, gossipAdvertise: *gossipAdv, seeds: *seeds,
			mgmt: *mgmt, token: *token, healthPublic: *health, manageWrite: *mWrite, preset: *preset, key: *key, logLevel: *logLevel,
			tlsCert: *tlsCert, tlsKey: *tlsKey, tlsCA: *tlsCA, plaintext: *plaintext,
			drain: *drain, remember: *remember, journal: *journal, voters: *voters, tieBreaker: *tieBreak,
			dataDir: *dataDir, noFsync: *noFsync, clusterName: *clusterNm, segmentBytes: *segment, queueDelay: *qDelay,
		}
	}
}

// prepared is what run needs, checked before anything listens.
type prepared struct {
	settings  runtime.Settings
	cluster   cluster.Config
	serverTLS *tls.Config
}

// prepare checks c and derives the settings and the cluster config from
// it, so that a bad configuration fails before the node is seen.
func prepare(c config) (prepared, error) {
	var p prepared
	if c.name == "" || c.group == "" {
		return p, errors.New("-name and -group are required")
	}
	settings, err := runtime.SettingsFromEnv(runtime.DefaultSettings())
	if err != nil {
		return p, err
	}
	if c.groups != "" {
		settings.Groups = cli.List(c.groups)
	}
	if err := settings.Validate(); err != nil {
		return p, err
	}
	if err := checkPlacement(c, settings.Groups); err != nil {
		return p, err
	}
	if p.cluster, err = clusterConfig(c); err != nil {
		return p, err
	}
	if err := cluster.CheckManagementAddr(c.mgmt, c.token, nil); err != nil {
		return p, fmt.Errorf("-mgmt: %w", err)
	}
	if c.healthPublic && c.token == "" {
		return p, errors.New("-health-public without -manage-token: every route is public already")
	}
	if err := checkAdvertise(c.rpc, c.advertise); err != nil {
		return p, err
	}
	if p.serverTLS, err = cli.ServerTLS(c.tlsCert, c.tlsKey, c.tlsCA); err != nil {
		return p, err
	}
	p.settings = settings
	return p, nil
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	p, err := prepare(c)
	if err != nil {
		return err
	}
	settings, ccfg, serverTLS := p.settings, p.cluster, p.serverTLS
	log = log.With("node", c.name)

	ledger := bank.NewLedger(c.remember, bank.WithJournal(c.journal))
	stats := cluster.NewStats()
	// Replication dials the other nodes over the same transport: a node
	// that serves TLS speaks TLS to its peers too, presenting its own
	// certificate (for mutual TLS) and trusting -rpc-tls-ca.
	var peerTLS *tls.Config
	if serverTLS != nil {
		peerTLS = &tls.Config{}
		if c.tlsCA != "" {
			if peerTLS, err = cli.ClientTLS(c.tlsCA, c.tlsCert, c.tlsKey); err != nil {
				return err
			}
		}
	}
	tcp, err := transport.NewTCP(transport.TCPConfig{
		Config:         transport.Config{Node: c.name, Group: c.group, Logger: log},
		TLS:            serverTLS,
		ClientTLS:      peerTLS,
		AllowPlaintext: c.plaintext,
	})
	if err != nil {
		return err
	}
	stats.WatchTransport(tcp)
	// Node makes the server a cluster member: its replicated writes wait
	// for the membership (UseMembership below) and catch up from peers
	// before it answers, so a restarted node never answers from an empty
	// ledger.
	// The ledger's handlers are short: past the suggested bounds a node
	// refuses work (ErrOverloaded) rather than queue it.
	if c.segmentBytes > 0 {
		// etcd's log keeps its segment size in one variable for the
		// process: set here, before any log is opened.
		wal.SegmentSizeBytes = int64(c.segmentBytes)
	}
	srv := runtime.NewServer(runtime.ServerConfig{Settings: settings, Metrics: stats, Logger: log, Node: c.name,
		Replication: replication(c), DataDir: c.dataDir,
		MaxPending: runtime.SuggestedMaxPending, MaxPendingPerEntity: runtime.SuggestedMaxPendingPerEntity,
		QueueDelay: c.queueDelay})
	stats.WatchLoad(srv)
	if err := registerAccounts(srv, ledger); err != nil {
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
	ccfg.Methods = srv.Methods()
	ccfg.Ready = srv.Ready
	ccfg.Logger = log
	cl, err := cluster.Start(ccfg)
	if err != nil {
		return err
	}
	defer cl.Shutdown()
	srv.UseMembership(cl)

	ms, err := cluster.ServeManagement(c.mgmt, management(c, settings.Groups, cl, stats, srv, ledger), nil)
	if err != nil {
		return err
	}
	defer ms.Shutdown(context.Background())

	log.Info("banknode serving", "service_version", serviceVersion, "group", c.group, "groups", settings.Groups, "rpc", ccfg.RPCAddr,
		"gossip", cl.LocalNode().GossipAddress, "mgmt", ms.Addr().String(), "mgmt_token", c.token != "", "seeds", ccfg.Seeds, "preset", c.preset)

	<-ctx.Done()
	log.Info("banknode stopping: refusing new work, leaving the replication group and the cluster")
	ledger.SetBusy(true)
	// The server leaves the raft group first (it hands leadership over and
	// is removed from the voters), which needs its peers to see it; then
	// the node leaves the gossip.
	dctx, cancel := context.WithTimeout(context.Background(), c.drain)
	defer cancel()
	if err := srv.Shutdown(dctx); err != nil {
		log.Warn("handlers still running at shutdown were cancelled", "err", err)
	}
	if err := cl.Leave(cluster.DefaultLeaveTimeout); err != nil {
		log.Warn("leave failed", "err", err)
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
	if c.gossipAdvertise != "" {
		host, port, err := net.SplitHostPort(c.gossipAdvertise)
		if err != nil {
			host, port = c.gossipAdvertise, strconv.Itoa(p)
		}
		if cfg.AdvertisePort, err = strconv.Atoi(port); err != nil || net.ParseIP(host) == nil {
			return cfg, fmt.Errorf("-gossip-advertise %q: want an IP address, with or without a port", c.gossipAdvertise)
		}
		cfg.AdvertiseAddr = host
	}
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
// the ledger's balances and journal that bankload audits, all behind
// c.token if set.
func management(c config, groups []string, cl interface {
	cluster.MemberSource
	cluster.MemberOperator
}, stats *cluster.Stats, srv *runtime.Server, ledger *bank.Ledger) cluster.ManagementConfig {
	balances := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := cli.Report{Node: c.name, Group: c.group, InFlight: len(srv.InFlight()), Snapshot: ledger.Snapshot(r.URL.Query().Get("prefix"))}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
	journal := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := cli.JournalReport{Node: c.name, Group: c.group, Journal: ledger.Journal()}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
	return cluster.ManagementConfig{
		Members:      cl,
		Operator:     cl,
		Metrics:      stats,
		Ops:          []runtime.InFlighter{srv},
		Replicas:     srv,
		Groups:       groups,
		Token:        c.token,
		PublicHealth: c.healthPublic,
		ReadWrite:    c.manageWrite,
		Routes:       map[string]http.Handler{"GET " + cli.BalancesPath: balances, "GET " + cli.JournalPath: journal},
	}
}
