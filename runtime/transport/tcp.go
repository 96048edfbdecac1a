package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Defaults for TCPConfig.
const (
	DefaultDialTimeout      = 2 * time.Second
	DefaultHandshakeTimeout = 2 * time.Second
)

// TCPConfig configures a TCP transport.
type TCPConfig struct {
	Config
	// DialTimeout bounds connecting, TLS included. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// HandshakeTimeout bounds the TLS and Hello exchange on both sides.
	// Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// TLS, when set, makes listeners accept TLS only: it holds the server's
	// certificates, and ClientAuth and ClientCAs for mutual TLS.
	TLS *tls.Config
	// ClientTLS, when set, makes Dial use TLS: RootCAs to trust the server,
	// Certificates for mutual TLS. ServerName defaults to the dialed host.
	ClientTLS *tls.Config
	// KeepAlive is the TCP keep-alive period; zero means the system
	// default, negative disables keep-alives.
	KeepAlive time.Duration
}

// TCP is a Transport over TCP, with TLS 1.3 or later when configured.
type TCP struct {
	cfg       TCPConfig
	serverTLS *tls.Config
	clientTLS *tls.Config
}

var (
	_ Transport = (*TCP)(nil)
	_ Listener  = (*tcpListener)(nil)
)

// NewTCP returns a TCP transport. It fails if a TLS configuration cannot
// work, such as a server configuration without certificates.
func NewTCP(cfg TCPConfig) (*TCP, error) {
	cfg.Config = cfg.Config.WithDefaults()
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	t := &TCP{cfg: cfg}
	if cfg.TLS != nil {
		c := cfg.TLS
		if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
			return nil, errors.New("transport: TCPConfig.TLS has no certificate")
		}
		t.serverTLS = tls13(c)
	}
	if cfg.ClientTLS != nil {
		t.clientTLS = tls13(cfg.ClientTLS)
	}
	return t, nil
}

// tls13 returns a copy of c that refuses anything older than TLS 1.3.
func tls13(c *tls.Config) *tls.Config {
	c = c.Clone()
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return c
}

// Dial connects to addr, runs the TLS handshake if configured, and exchanges
// Hello frames. Every failure wraps ErrRefused.
func (t *TCP) Dial(ctx context.Context, addr string, h Handler) (Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: t.cfg.KeepAlive}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dialing %s: %w", ErrRefused, addr, err)
	}
	setNoDelay(nc)
	if t.clientTLS != nil {
		c := t.clientTLS
		if c.ServerName == "" && !c.InsecureSkipVerify {
			c = c.Clone()
			if c.ServerName, _, err = net.SplitHostPort(addr); err != nil {
				nc.Close()
				return nil, fmt.Errorf("%w: %s: %w", ErrRefused, addr, err)
			}
		}
		tc := tls.Client(nc, c)
		hctx, hcancel := context.WithTimeout(ctx, t.cfg.HandshakeTimeout)
		err = tc.HandshakeContext(hctx)
		hcancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("%w: TLS handshake with %s: %w", ErrRefused, addr, err)
		}
		nc = tc
	}
	// The Hello exchange is where a TLS 1.3 client first hears that the
	// server rejected its certificate. ctx ends it early by expiring the
	// socket's deadline.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	peer, fr, err := handshake(nc, t.cfg.Config, t.cfg.HandshakeTimeout)
	if !stop() && err == nil {
		err = context.Cause(ctx) // the deadline may have hit the new stream
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: hello exchange with %s: %w", ErrRefused, addr, err)
	}
	return newStream(nc, fr, peer, t.cfg.Config, h), nil
}

// Listen accepts connections at addr ("host:port"; port 0 picks one).
func (t *TCP) Listen(addr string, h Handler) (Listener, error) {
	lc := net.ListenConfig{KeepAlive: t.cfg.KeepAlive}
	nl, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	l := &tcpListener{t: t, nl: nl, h: h, done: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func setNoDelay(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
}

type tcpListener struct {
	t    *TCP
	nl   net.Listener
	h    Handler
	once sync.Once
	done chan struct{}
	wg   sync.WaitGroup // the accept loop and handshakes in progress
}

// Addr returns the resolved listening address.
func (l *tcpListener) Addr() string { return l.nl.Addr().String() }

// Close stops accepting and waits for handshakes in progress to end;
// established connections stay open.
func (l *tcpListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.nl.Close()
	})
	l.wg.Wait()
	return err
}

func (l *tcpListener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.nl.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.t.cfg.Logger.Warn("transport: accept failed", "addr", l.Addr(), "err", err, "retry", delay)
			select {
			case <-time.After(delay):
			case <-l.done:
				return
			}
			continue
		}
		delay = 0
		l.wg.Add(1)
		go l.serve(nc)
	}
}

// serve runs the handshakes of one accepted connection.
func (l *tcpListener) serve(nc net.Conn) {
	defer l.wg.Done()
	setNoDelay(nc)
	cfg := l.t.cfg
	if l.t.serverTLS != nil {
		tc := tls.Server(nc, l.t.serverTLS)
		ctx, cancel := context.WithTimeout(context.Background(), cfg.HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			cfg.Logger.Warn("transport: refused connection: TLS handshake failed",
				"addr", nc.RemoteAddr().String(), "err", err)
			nc.Close()
			return
		}
		nc = tc
	}
	peer, fr, err := handshake(nc, cfg.Config, cfg.HandshakeTimeout)
	if err != nil {
		cfg.Logger.Warn("transport: refused connection: hello exchange failed",
			"addr", nc.RemoteAddr().String(), "err", err)
		nc.Close()
		return
	}
	newStream(nc, fr, peer, cfg.Config, l.h)
}
