package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/rpc"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/ffgen/ffgen/bench/echo"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

// A system is one RPC stack under comparison: how its server listens (in
// the server process) and how a client calls it (in the driver).
type system struct {
	name string
	// serve starts the server on loopback and returns the addresses to
	// dial and its counters.
	serve func() (addrs []string, c counters, err error)
	// dial connects a client to addrs.
	dial func(addrs []string) (client, error)
}

// A client calls one system. Callers on several goroutines share it
// through workers.
type client interface {
	// worker returns a call function for one goroutine: the raw TCP
	// client gives each its own connection, the others share theirs.
	worker() (call func(key string, payload []byte) error, done func())
	// hold starts a long operation that ends when ctx does; only ffgen
	// takes part in the in-flight phase.
	hold(ctx context.Context, key string) error
	close()
}

var systems = []*system{
	{name: "ffgen", serve: serveFFGen, dial: dialFFGen},
	{name: "grpc-go", serve: serveGRPC, dial: dialGRPC},
	{name: "net/rpc", serve: serveNetRPC, dial: dialNetRPC},
	{name: "raw TCP", serve: serveRaw, dial: dialRaw},
}

const (
	keyLen     = 7
	payloadLen = 32
)

// counters report what a server holds: connections, long operations
// running (nil where the system takes no part in the in-flight phase),
// and a replicated system's newest raft term (nil for the others).
type counters struct {
	conns func() int
	held  func() int
	term  func() uint64
}

// countingListener counts the connections a server holds.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.Add(1)
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.n.Add(-1) })
	return c.Conn.Close()
}

func (l *countingListener) counters() counters {
	return counters{conns: func() int { return int(l.n.Load()) }}
}

func listenCounting() (*countingListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &countingListener{Listener: ln}, nil
}

// ffgen: two nodes, one per failure group (a deployment needs two), with
// default settings, in the server process; the client routes each key to
// its owner as it would in production.

var ffgenGroups = []string{"a", "b"}

func ffgenSettings() runtime.Settings {
	s := runtime.DefaultSettings()
	s.Groups = ffgenGroups
	return s
}

func serveFFGen() ([]string, counters, error) {
	var addrs []string
	var tcps []*transport.TCP
	impl := &echo.Server{}
	for _, g := range ffgenGroups {
		t, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: g + "1", Group: g}})
		if err != nil {
			return nil, counters{}, err
		}
		// The in-flight row holds 10,000 long operations open on one
		// node, past the default admission limit: overload is not what
		// this bench measures (make overload does).
		srv := runtime.NewServer(runtime.ServerConfig{Settings: ffgenSettings(), Node: g + "1", MaxPending: -1})
		if err := echo.RegisterEchoServer(srv, impl); err != nil {
			return nil, counters{}, err
		}
		ln, err := srv.Serve(t, "127.0.0.1:0")
		if err != nil {
			return nil, counters{}, err
		}
		addrs = append(addrs, ln.Addr())
		tcps = append(tcps, t)
	}
	conns := func() int {
		n := 0
		for _, t := range tcps {
			n += int(t.NodeStats().Conns)
		}
		return n
	}
	return addrs, counters{conns: conns, held: func() int { return int(impl.Held()) }}, nil
}

type ffgenClient struct {
	rc *runtime.Client
	c  *echo.EchoClient
}

func dialFFGen(addrs []string) (client, error) {
	if len(addrs) != len(ffgenGroups) {
		return nil, fmt.Errorf("ffgen: want %d addresses, got %q", len(ffgenGroups), addrs)
	}
	members := runtime.NewStaticMembership()
	for i, g := range ffgenGroups {
		members.Add(runtime.Member{Name: g + "1", Group: g, Addr: addrs[i], Services: []string{echo.EchoDesc.Name}})
	}
	t, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "bench", Group: "clients"}})
	if err != nil {
		return nil, err
	}
	rc, err := runtime.NewClient(runtime.ClientConfig{Transport: t, Membership: members, Settings: ffgenSettings(),
		Limit: runtime.LimitConfig{Disabled: true}}) // as the server's admission limit, above
	if err != nil {
		return nil, err
	}
	return &ffgenClient{rc: rc, c: echo.NewEchoClient(rc)}, nil
}

func (f *ffgenClient) worker() (func(string, []byte) error, func()) {
	ctx := context.Background()
	return func(key string, payload []byte) error {
		out, err := f.c.Echo(ctx, key, payload)
		if err == nil && len(out) != len(payload) {
			err = fmt.Errorf("ffgen: %d bytes back, sent %d", len(out), len(payload))
		}
		return err
	}, func() {}
}

func (f *ffgenClient) hold(ctx context.Context, key string) error {
	return f.c.Hold(ctx, key, time.Hour)
}

func (f *ffgenClient) close() { f.rc.Close() }

// grpc-go: one unary method, registered by hand, with a codec that passes
// bytes through (the request is key and payload, the reply the payload), so
// that protobuf's cost is not counted against it.

type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = data.Materialize()
	return nil
}

const grpcMethod = "/bench.Echo/Echo"

var grpcDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			if len(in) < keyLen {
				return nil, errors.New("short request")
			}
			out := in[keyLen:]
			return &out, nil
		},
	}},
}

func serveGRPC() ([]string, counters, error) {
	ln, err := listenCounting()
	if err != nil {
		return nil, counters{}, err
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}))
	srv.RegisterService(&grpcDesc, struct{}{})
	go srv.Serve(ln)
	return []string{ln.Addr().String()}, ln.counters(), nil
}

type grpcClient struct{ cc *grpc.ClientConn }

func dialGRPC(addrs []string) (client, error) {
	cc, err := grpc.NewClient(addrs[0],
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		return nil, err
	}
	return &grpcClient{cc: cc}, nil
}

func (g *grpcClient) worker() (func(string, []byte) error, func()) {
	ctx := context.Background()
	var req []byte
	return func(key string, payload []byte) error {
		req = append(append(req[:0], key...), payload...)
		var out []byte
		if err := g.cc.Invoke(ctx, grpcMethod, &req, &out); err != nil {
			return err
		}
		if len(out) != len(payload) {
			return fmt.Errorf("grpc-go: %d bytes back, sent %d", len(out), len(payload))
		}
		return nil
	}, func() {}
}

func (g *grpcClient) hold(context.Context, string) error { return errors.ErrUnsupported }
func (g *grpcClient) close()                             { g.cc.Close() }

// net/rpc: the standard library's RPC with its default gob encoding.

// EchoArgs is the net/rpc request.
type EchoArgs struct {
	Key     string
	Payload []byte
}

// EchoRPC is the net/rpc service.
type EchoRPC struct{}

// Echo returns the payload.
func (EchoRPC) Echo(a *EchoArgs, reply *[]byte) error {
	*reply = a.Payload
	return nil
}

func serveNetRPC() ([]string, counters, error) {
	srv := rpc.NewServer()
	if err := srv.Register(EchoRPC{}); err != nil {
		return nil, counters{}, err
	}
	ln, err := listenCounting()
	if err != nil {
		return nil, counters{}, err
	}
	go srv.Accept(ln)
	return []string{ln.Addr().String()}, ln.counters(), nil
}

type netRPCClient struct{ c *rpc.Client }

func dialNetRPC(addrs []string) (client, error) {
	c, err := rpc.Dial("tcp", addrs[0])
	if err != nil {
		return nil, err
	}
	return &netRPCClient{c: c}, nil
}

func (n *netRPCClient) worker() (func(string, []byte) error, func()) {
	var args EchoArgs
	return func(key string, payload []byte) error {
		args = EchoArgs{Key: key, Payload: payload}
		var out []byte
		if err := n.c.Call("EchoRPC.Echo", &args, &out); err != nil {
			return err
		}
		if len(out) != len(payload) {
			return fmt.Errorf("net/rpc: %d bytes back, sent %d", len(out), len(payload))
		}
		return nil
	}, func() {}
}

func (n *netRPCClient) hold(context.Context, string) error { return errors.ErrUnsupported }
func (n *netRPCClient) close()                             { n.c.Close() }

// raw TCP: fixed-size messages, one connection per caller, no framing, no
// multiplexing: the floor that the kernel and the Go runtime set.

func serveRaw() ([]string, counters, error) {
	ln, err := listenCounting()
	if err != nil {
		return nil, counters{}, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var buf [keyLen + payloadLen]byte
				for {
					if _, err := io.ReadFull(c, buf[:]); err != nil {
						return
					}
					if _, err := c.Write(buf[keyLen:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return []string{ln.Addr().String()}, ln.counters(), nil
}

type rawClient struct{ addr string }

func dialRaw(addrs []string) (client, error) { return &rawClient{addr: addrs[0]}, nil }

func (r *rawClient) worker() (func(string, []byte) error, func()) {
	var c net.Conn
	var req [keyLen + payloadLen]byte
	var resp [payloadLen]byte
	call := func(key string, payload []byte) error {
		if c == nil {
			var err error
			if c, err = net.Dial("tcp", r.addr); err != nil {
				return err
			}
		}
		copy(req[:keyLen], key)
		copy(req[keyLen:], payload)
		if _, err := c.Write(req[:]); err != nil {
			return err
		}
		_, err := io.ReadFull(c, resp[:])
		return err
	}
	return call, func() {
		if c != nil {
			c.Close()
		}
	}
}

func (r *rawClient) hold(context.Context, string) error { return errors.ErrUnsupported }
func (r *rawClient) close()                             {}

func systemNamed(name string) *system {
	for _, s := range append(systems[:len(systems):len(systems)], replSystems...) {
		if s.name == name {
			return s
		}
	}
	return nil
}

// addrList is how the server process reports its addresses.
func addrList(addrs []string) string { return strings.Join(addrs, ",") }
