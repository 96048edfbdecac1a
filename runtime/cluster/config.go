package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ffgen/ffgen/runtime"
)

// Preset selects memberlist's timing.
type Preset int

const (
	// PresetLAN is memberlist's DefaultLANConfig: a crash is declared dead
	// after several seconds, with few false suspicions on a busy network.
	PresetLAN Preset = iota
	// PresetLocal is for many nodes on one machine or a quiet LAN: fast
	// probes and short suspicion, so a crash is declared dead in 1-2 s.
	PresetLocal
)

func (p Preset) String() string {
	switch p {
	case PresetLAN:
		return "lan"
	case PresetLocal:
		return "local"
	}
	return fmt.Sprintf("preset(%d)", int(p))
}

// Config configures one cluster node. Start it from DefaultLANConfig or
// DefaultLocalConfig and fill in the node's identity.
type Config struct {
	Name  string // unique node name; required
	Group string // failure group; required
	// Groups are the cluster's failure groups (runtime.Settings.Groups).
	// If set, Group must be one of them: a node in a group no client
	// routes to would join and serve nothing. A tie-breaker
	// (runtime.ReplicationConfig.TieBreaker) serves no calls and sits
	// outside them: leave Groups empty on it.
	Groups []string

	BindAddr      string // gossip listen address
	BindPort      int    // gossip port (UDP and TCP); 0 picks a free one
	AdvertiseAddr string // address others reach us on; empty: derived from BindAddr
	AdvertisePort int    // 0: the bound port

	// RPCAddr is the fast-failover server's address, published in
	// metadata: an address peers can dial, never a wildcard such as
	// 0.0.0.0 or [::] (see CheckRPCAddr). A server bound to every
	// interface publishes the address it is reached on.
	RPCAddr string

	Services []string // services this node serves, published in metadata
	// Methods, if set, is what the node advertises of the methods of its
	// services (runtime.Server.Methods), published in metadata: clients
	// route a call to a node that serves its method compatibly while a
	// rollout mixes versions, and the leader of a replicated service
	// proposes a write only when every voter serves its method alike.
	Methods map[string][]runtime.ServedMethod

	// Ready, if set, reports whether the node's replicas are caught up
	// (runtime.Server.Ready); the node publishes "catching up" in its
	// metadata while it returns an error, and every member lists it.
	Ready func() error

	// Seeds are gossip addresses of nodes to join: "host:port", or
	// "dns+name:port" (every A/AAAA address of name) or
	// "dnssrv+_svc._tcp.name" (every SRV target), resolved again at every
	// join attempt (see Resolve). Joining retries in the background with
	// exponential backoff between JoinRetryMin and JoinRetryMax until one
	// succeeds, so nodes may start in any order. No seeds: this node
	// starts a new cluster.
	Seeds        []string
	JoinRetryMin time.Duration
	JoinRetryMax time.Duration
	// Resolver resolves the DNS seeds; nil is net.DefaultResolver.
	Resolver *net.Resolver

	// SecretKey enables gossip encryption (AES, 16, 24 or 32 bytes); every
	// node must use the same key. Keyring, if set, wins (key rotation).
	SecretKey []byte
	Keyring   *memberlist.Keyring

	Preset Preset

	// ForgetAfter is how long dead and left nodes stay listed by AllMembers.
	ForgetAfter time.Duration

	// ReconnectInterval is how often the node joins one member it lists as
	// dead, to heal a partition that outlasted memberlist's gossip to the
	// dead; zero disables it. ReconnectTimeout is how long after a death
	// it keeps trying (zero: as long as the member is listed, ForgetAfter).
	// A member that left is never retried.
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration

	// Logger receives this package's logs and memberlist's, at debug level
	// except memberlist's errors. Nil discards them. It is used as it is:
	// a process that logs for several nodes binds each one's name
	// (Logger.With("node", name)), so that no record carries it twice.
	Logger *slog.Logger

	// Tune, if set, adjusts the memberlist configuration after the preset
	// and the fields above are applied: an escape hatch for rare settings.
	Tune func(*memberlist.Config)
}

// DefaultLANConfig returns the settings for a cluster on a LAN.
func DefaultLANConfig() Config {
	return Config{
		BindAddr:     "0.0.0.0",
		BindPort:     7946,
		JoinRetryMin: time.Second,
		JoinRetryMax: 30 * time.Second,
		Preset:       PresetLAN,
		ForgetAfter:  10 * time.Minute,
		// The push-pull interval of the LAN preset: a healed partition
		// costs no more than memberlist's own anti-entropy.
		ReconnectInterval: 30 * time.Second,
		ReconnectTimeout:  10 * time.Minute,
	}
}

// DefaultLocalConfig returns the settings for nodes on one machine:
// loopback, a free port, fast failure detection.
func DefaultLocalConfig() Config {
	return Config{
		BindAddr:     "127.0.0.1",
		BindPort:     0,
		JoinRetryMin: 100 * time.Millisecond,
		JoinRetryMax: 2 * time.Second,
		Preset:       PresetLocal,
		ForgetAfter:  10 * time.Minute,
		// Clients route to the far side of a healed partition again
		// only once this brings it back to life in the membership, so
		// it is short: one TCP exchange with one dead member a second
		// is cheap on one machine. (Replication does not wait for it.)
		ReconnectInterval: time.Second,
		ReconnectTimeout:  10 * time.Minute,
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("missing Name"))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("missing Group"))
	} else if len(c.Groups) > 0 && !slices.Contains(c.Groups, c.Group) {
		errs = append(errs, fmt.Errorf("the node's Group %q is not one of the failure groups %v: no client would route to this node; "+
			"give it one of them, or add %q to the groups of every node and client (FFGEN_GROUPS)", c.Group, c.Groups, c.Group))
	}
	if c.Preset != PresetLAN && c.Preset != PresetLocal {
		errs = append(errs, fmt.Errorf("unknown %v", c.Preset))
	}
	if n := len(c.SecretKey); n != 0 && n != 16 && n != 24 && n != 32 {
		errs = append(errs, fmt.Errorf("SecretKey is %d bytes, want 16, 24 or 32", n))
	}
	if c.RPCAddr != "" {
		if err := CheckRPCAddr(c.RPCAddr); err != nil {
			errs = append(errs, err)
		}
	}
	if err := checkAddresses(c.Seeds); err != nil {
		errs = append(errs, fmt.Errorf("seeds: %w", err))
	}
	if c.JoinRetryMin <= 0 || c.JoinRetryMax < c.JoinRetryMin {
		errs = append(errs, fmt.Errorf("join backoff %v..%v: want 0 < JoinRetryMin <= JoinRetryMax", c.JoinRetryMin, c.JoinRetryMax))
	}
	if c.ReconnectInterval < 0 || c.ReconnectTimeout < 0 {
		errs = append(errs, fmt.Errorf("reconnect %v for %v: want durations >= 0", c.ReconnectInterval, c.ReconnectTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: invalid config: %w", err)
	}
	return nil
}

// memberlistConfig translates c into memberlist's configuration.
func (c *Config) memberlistConfig() *memberlist.Config {
	var mc *memberlist.Config
	switch c.Preset {
	case PresetLocal:
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 100 * time.Millisecond
		// Suspicion lasts 3 probe intervals, at most twice that while
		// waiting for peers to confirm: short enough for ~1-2 s, long
		// enough for a slow but alive node to refute.
		mc.SuspicionMult = 3
		mc.SuspicionMaxTimeoutMult = 2
		mc.GossipInterval = 50 * time.Millisecond
		mc.PushPullInterval = 5 * time.Second
		mc.GossipToTheDeadTime = 5 * time.Second
		mc.TCPTimeout = time.Second
		// A restarted node usually gets a new port on one machine.
		mc.DeadNodeReclaimTime = time.Millisecond
	default:
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = c.Name
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort
	}
	mc.SecretKey = c.SecretKey
	mc.Keyring = c.Keyring
	if c.Tune != nil {
		c.Tune(mc)
	}
	return mc
}

// CheckRPCAddr reports an error unless addr ("host:port") is one peers can
// dial: a host that is not a wildcard (empty, 0.0.0.0, [::]) and a port
// that is not 0. A listener bound to every interface reports a wildcard
// address, which other machines cannot reach.
func CheckRPCAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("RPCAddr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("RPCAddr %q is a wildcard address that peers cannot dial: publish the address they reach this node on", addr)
	}
	if port == "0" || port == "" {
		return fmt.Errorf("RPCAddr %q has no port: publish the port the listener got", addr)
	}
	return nil
}
