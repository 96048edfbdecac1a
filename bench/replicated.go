package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/ffgen/ffgen/bench/kv"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The replicated-write systems: three-member clusters on loopback, each
// cluster in a server process of its own, its data under the directory
// the driver passes in dataDirEnv (every cluster's under the same one, so
// on the same disk). A write is a 7-byte key and a 32-byte value, stored
// once a majority of the three holds it.
//
// ffgen runs three nodes, not the four of a deployment of two failure
// groups of two: with three voters a write waits for the leader and one
// follower, as an etcd Put in a three-member cluster does, so the two do
// the same replication work. The nodes are in three failure groups, so
// that any of them may lead, as any etcd member may.
var replSystems = []*system{
	{name: ffgenDurable, serve: serveFFGenReplicated(true), dial: dialFFGenReplicated},
	{name: ffgenInMemory, serve: serveFFGenReplicated(false), dial: dialFFGenReplicated},
	{name: "etcd " + version.Version, serve: serveEtcd, dial: dialEtcd},
}

const (
	ffgenDurable  = "ffgen, fsync"
	ffgenInMemory = "ffgen, in memory"
)

// Indexes into replSystems.
const (
	replDurableIdx = iota
	replMemoryIdx
	replEtcdIdx
)

// dataDirEnv passes a replicated system's server process the directory
// to keep its data under.
const dataDirEnv = "BENCH_COMPARE_DATADIR"

var replNodes = []struct{ name, group string }{{"a1", "a"}, {"b1", "b"}, {"c1", "c"}}

func replSettings() runtime.Settings {
	s := runtime.DefaultSettings()
	for _, n := range replNodes {
		s.Groups = append(s.Groups, n.group)
	}
	return s
}

// quietLogger keeps the servers' start-up lines out of the table's way.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// serveFFGenReplicated starts three nodes of kv.KV; durable keeps each
// node's raft state under the data directory, with an fsync before every
// acknowledgement (the default), else in memory.
func serveFFGenReplicated(durable bool) func() ([]string, counters, error) {
	return func() ([]string, counters, error) {
		dir := os.Getenv(dataDirEnv)
		if durable && dir == "" {
			return nil, counters{}, fmt.Errorf("no data directory (%s)", dataDirEnv)
		}
		members := runtime.NewStaticMembership()
		voters := make([]string, len(replNodes))
		for i, n := range replNodes {
			voters[i] = n.name
		}
		var servers []*runtime.Server
		var tcps []*transport.TCP
		var ms []runtime.Member
		for _, n := range replNodes {
			t, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: n.name, Group: n.group, Logger: quietLogger()}})
			if err != nil {
				return nil, counters{}, err
			}
			sc := runtime.ServerConfig{Settings: replSettings(), Node: n.name, Membership: members, Logger: quietLogger(),
				Replication: runtime.ReplicationConfig{Voters: voters}}
			if durable {
				sc.DataDir = filepath.Join(dir, n.name)
			}
			srv := runtime.NewServer(sc)
			if err := kv.RegisterKVServer(srv, kv.NewServer()); err != nil {
				return nil, counters{}, err
			}
			ln, err := srv.Serve(t, "127.0.0.1:0")
			if err != nil {
				return nil, counters{}, err
			}
			servers = append(servers, srv)
			tcps = append(tcps, t)
			ms = append(ms, runtime.Member{Name: n.name, Group: n.group, Addr: ln.Addr(), Services: []string{kv.KVDesc.Name}})
		}
		members.Set(ms)
		err := waitUntil(time.Minute, func() error {
			for _, srv := range servers {
				if err := srv.Ready(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, counters{}, fmt.Errorf("not ready: %w", err)
		}
		addrs := make([]string, len(ms))
		for i, m := range ms {
			addrs[i] = m.Addr
		}
		return addrs, counters{
			conns: func() int {
				n := 0
				for _, t := range tcps {
					n += int(t.NodeStats().Conns)
				}
				return n
			},
			term: func() uint64 {
				var term uint64
				for _, srv := range servers {
					for _, st := range srv.Replication() {
						term = max(term, st.Term)
					}
				}
				return term
			},
		}, nil
	}
}

// waitUntil polls ready until it returns nil, for at most d.
func waitUntil(d time.Duration, ready func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := ready()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type kvClient struct {
	rc *runtime.Client
	c  *kv.KVClient
}

func dialFFGenReplicated(addrs []string) (client, error) {
	if len(addrs) != len(replNodes) {
		return nil, fmt.Errorf("ffgen: want %d addresses, got %q", len(replNodes), addrs)
	}
	members := runtime.NewStaticMembership()
	for i, n := range replNodes {
		members.Add(runtime.Member{Name: n.name, Group: n.group, Addr: addrs[i], Services: []string{kv.KVDesc.Name}})
	}
	t, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "bench", Group: "clients", Logger: quietLogger()}})
	if err != nil {
		return nil, err
	}
	rc, err := runtime.NewClient(runtime.ClientConfig{Transport: t, Membership: members, Settings: replSettings(), Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	return &kvClient{rc: rc, c: kv.NewKVClient(rc)}, nil
}

func (k *kvClient) worker() (func(string, []byte) error, func()) {
	ctx := context.Background()
	return func(key string, payload []byte) error { return k.c.Put(ctx, key, payload) }, func() {}
}

func (k *kvClient) hold(context.Context, string) error { return errors.ErrUnsupported }
func (k *kvClient) close()                             { k.rc.Close() }

// etcd: three embedded members with etcd's defaults (fsync on, snapshots
// every 10,000 writes), logging errors only. The leader's client address
// comes first, and the client is given only that one: every Put goes
// straight to the leader, as ffgen's client sends its writes to the node
// that answered the last one, so that no Put pays for a follower
// forwarding it.
func serveEtcd() ([]string, counters, error) {
	dir := os.Getenv(dataDirEnv)
	if dir == "" {
		return nil, counters{}, fmt.Errorf("no data directory (%s)", dataDirEnv)
	}
	names := []string{"e1", "e2", "e3"}
	peers, clients := make([]url.URL, len(names)), make([]url.URL, len(names))
	ports, err := freePorts(2 * len(names))
	if err != nil {
		return nil, counters{}, err
	}
	var initial []string
	for i, name := range names {
		peers[i] = url.URL{Scheme: "http", Host: ports[2*i]}
		clients[i] = url.URL{Scheme: "http", Host: ports[2*i+1]}
		initial = append(initial, name+"="+peers[i].String())
	}
	var members []*embed.Etcd
	for i, name := range names {
		cfg := embed.NewConfig()
		cfg.Name = name
		cfg.Dir = filepath.Join(dir, name)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peers[i]}, []url.URL{peers[i]}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clients[i]}, []url.URL{clients[i]}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "bench-compare"
		cfg.LogLevel = "error"
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			return nil, counters{}, fmt.Errorf("etcd member %s: %w", name, err)
		}
		members = append(members, e)
	}
	for _, e := range members {
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			return nil, counters{}, err
		case <-time.After(time.Minute):
			return nil, counters{}, errors.New("etcd members not ready within a minute")
		}
	}
	var addrs []string
	err = waitUntil(time.Minute, func() error {
		for i, e := range members {
			if e.Server.Leader() == e.Server.MemberID() {
				addrs = append([]string{clients[i].String()}, addrs...)
				for j := range clients {
					if j != i {
						addrs = append(addrs, clients[j].String())
					}
				}
				return nil
			}
		}
		return errors.New("etcd: no leader")
	})
	if err != nil {
		return nil, counters{}, err
	}
	return addrs, counters{
		conns: func() int { return 0 },
		term: func() uint64 {
			var term uint64
			for _, e := range members {
				term = max(term, e.Server.Term())
			}
			return term
		},
	}, nil
}

// freePorts returns n loopback addresses, each with a different port
// that was free a moment ago (etcd's members must know each other's
// addresses before they listen).
func freePorts(n int) ([]string, error) {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Held open until all are chosen, so that none comes twice.
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

type etcdClient struct{ c *clientv3.Client }

func dialEtcd(addrs []string) (client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: addrs[:1], DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &etcdClient{c: c}, nil
}

func (e *etcdClient) worker() (func(string, []byte) error, func()) {
	ctx := context.Background()
	return func(key string, payload []byte) error {
		_, err := e.c.Put(ctx, key, string(payload))
		return err
	}, func() {}
}

func (e *etcdClient) hold(context.Context, string) error { return errors.ErrUnsupported }
func (e *etcdClient) close()                             { e.c.Close() }
