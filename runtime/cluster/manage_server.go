package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// DefaultManagementAddr is where the management API listens by default:
// loopback only.
const DefaultManagementAddr = "127.0.0.1:8558"

// ErrInsecureManagement is returned when the management API would listen
// beyond loopback with neither a bearer token nor mutual TLS.
var ErrInsecureManagement = errors.New("cluster: management API beyond loopback needs a bearer token or mutual TLS")

// ManagementServer serves the management API on its own listener.
type ManagementServer struct {
	srv *http.Server
	ln  net.Listener
	err chan error

	once    sync.Once
	stopErr error
}

// ServeManagement listens on addr (DefaultManagementAddr if empty) and
// serves NewManagement(cfg), returning cfg's validation error, if any,
// before it listens. tlsConfig, if set, serves HTTPS; it counts as mutual
// TLS only with ClientAuth RequireAndVerifyClientCert. An address other
// than loopback requires cfg.Token or mutual TLS.
func ServeManagement(addr string, cfg ManagementConfig, tlsConfig *tls.Config) (*ManagementServer, error) {
	if addr == "" {
		addr = DefaultManagementAddr
	}
	handler, err := newManagement(cfg)
	if err != nil {
		return nil, err
	}
	if err := CheckManagementAddr(addr, cfg.Token, tlsConfig); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: management listen: %w", err)
	}
	ln = rpcAnswering{ln}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	s := &ManagementServer{
		srv: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
		},
		ln:  ln,
		err: make(chan error, 1),
	}
	go func() { s.err <- s.srv.Serve(ln) }()
	return s, nil
}

// CheckManagementAddr returns the error ServeManagement would return for
// addr (DefaultManagementAddr if empty), the token and tlsConfig: a
// malformed address, or ErrInsecureManagement. A node can call it before it
// joins the cluster, to fail before anyone has seen it.
func CheckManagementAddr(addr, token string, tlsConfig *tls.Config) error {
	if addr == "" {
		addr = DefaultManagementAddr
	}
	loop, err := isLoopback(addr)
	if err != nil {
		return err
	}
	mutualTLS := tlsConfig != nil && tlsConfig.ClientAuth == tls.RequireAndVerifyClientCert
	if !loop && token == "" && !mutualTLS {
		return fmt.Errorf("%w: refusing to listen on %s", ErrInsecureManagement, addr)
	}
	return nil
}

// isLoopback is transport.IsLoopback, with the address named in its error.
func isLoopback(addr string) (bool, error) {
	loop, err := transport.IsLoopback(addr)
	if err != nil {
		return false, fmt.Errorf("cluster: management address %q: %w", addr, err)
	}
	return loop, nil
}

// Addr returns the address the server listens on.
func (s *ManagementServer) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops accepting requests and waits for the running ones until
// ctx ends.
func (s *ManagementServer) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.stopErr = s.srv.Shutdown(ctx)
		if err := <-s.err; !errors.Is(err, http.ErrServerClosed) {
			s.stopErr = errors.Join(s.stopErr, err)
		}
	})
	return s.stopErr
}

// rpcAnswering answers, at once and in HTTP, a connection whose first byte
// is that of an ffgen frame (the high byte of its length prefix, zero for
// any frame, where an HTTP request starts with its method and TLS with
// 0x16): an RPC client or a node given this management address as a
// node's RPC address. Go's HTTP server would wait for a line that never
// comes; the dialer reads the answer as transport.ErrNotRPC, naming this
// address, instead of a timeout.
type rpcAnswering struct{ net.Listener }

func (l rpcAnswering) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rpcAnsweringConn{Conn: c}, nil
}

type rpcAnsweringConn struct {
	net.Conn
	seen atomic.Bool // the first read is done
}

// notRPCAnswer is what an ffgen dialer reads instead of a Hello.
const notRPCAnswer = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" +
	"this is an ffgen management (HTTP) address, not a node's RPC address\n"

func (c *rpcAnsweringConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.seen.Swap(true) && p[0] == 0 {
		c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c.Conn, notRPCAnswer)
		c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}
