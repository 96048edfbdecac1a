package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
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
	// AllowPlaintext lets Listen accept connections without TLS on an
	// address beyond loopback. Without it, and without TLS, Listen refuses
	// such an address: anyone who can reach the port could send writes.
	AllowPlaintext bool
	// MaxConns bounds the accepted connections open at once, those still
	// in their handshake included; one more is closed at once. Default
	// DefaultMaxConns; negative means no limit.
	MaxConns int
	// MaxBufferedBytes bounds the read-buffer memory this node's
	// connections hold beyond a small base each (16 KiB): frames larger
	// than that, each charged twice its length (the chunks gathering it
	// and the buffer they are copied into) from the moment its length
	// arrives. A connection whose frame would pass it is closed before
	// the frame's body is read. Default DefaultMaxBufferedBytes; negative
	// means no limit.
	MaxBufferedBytes int64
	// MaxHandshakes bounds the accepted connections in their TLS and
	// Hello exchange at once. While it is reached the node stops
	// accepting, so a storm of new connections waits in the kernel's
	// backlog instead of taking CPU from established connections, which
	// never wait for it. Default DefaultMaxHandshakes; negative means no
	// limit.
	MaxHandshakes int
	// HandshakeWait is how long accepting waits for a handshake slot
	// before it gives up on the slots freeing soon: from then on, until one
	// frees, every new connection is closed as soon as it is accepted
	// (without TLS after a Hello that says the node is at its limit).
	// Default DefaultHandshakeWait.
	HandshakeWait time.Duration
	// AcceptRate bounds the new connections the node takes a second, and
	// AcceptBurst how many of them it takes at once after a quiet moment.
	// Beyond the rate the node stops accepting, so new connections wait
	// in the kernel's backlog; only when they keep coming faster than the
	// rate for a second does it close them as soon as it accepts them,
	// until they slow down. The defaults take a reconnect storm of a few
	// hundred connections without closing one. Default DefaultAcceptRate
	// and DefaultAcceptBurst; a negative AcceptRate means no limit.
	AcceptRate  int
	AcceptBurst int
}

// TCP is a Transport over TCP, with TLS 1.3 or later when configured. Its
// fields are set by NewTCP and not changed after.
type TCP struct {
	cfg       TCPConfig
	serverTLS *tls.Config
	clientTLS *tls.Config
	g         *guard
	rate      *acceptBucket
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
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxBufferedBytes == 0 {
		cfg.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if cfg.MaxHandshakes == 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.HandshakeWait <= 0 {
		cfg.HandshakeWait = DefaultHandshakeWait
	}
	if cfg.AcceptRate == 0 {
		cfg.AcceptRate = DefaultAcceptRate
	}
	if cfg.AcceptBurst <= 0 {
		cfg.AcceptBurst = DefaultAcceptBurst
	}
	t := &TCP{cfg: cfg, g: newGuard(cfg.MaxConns, cfg.MaxBufferedBytes, cfg.Logger), rate: newAcceptBucket(cfg.AcceptRate, cfg.AcceptBurst)}
	t.g.shakes = newHandshakeSlots(cfg.MaxHandshakes)
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

// NodeStats reports this node's connections, buffered bytes and refusals.
func (t *TCP) NodeStats() NodeStats { return t.g.stats() }

// Dial connects to addr, runs the TLS handshake if configured, and exchanges
// Hello frames. A failure to connect wraps ErrRefused; a TLS failure,
// ErrTLS; a peer that speaks another protocol or version, ErrProtocol.
func (t *TCP) Dial(ctx context.Context, addr string, h ConnHandler) (Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: t.cfg.KeepAlive}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dialing %s: %w", ErrRefused, addr, err)
	}
	if u := conncap.UnackedTimeout(ctx); u > 0 {
		if tc, ok := nc.(*net.TCPConn); ok {
			if err := closeUnackedAfter(tc, u); err != nil {
				nc.Close()
				return nil, fmt.Errorf("%w: %s: TCP_USER_TIMEOUT: %w", ErrRefused, addr, err)
			}
		}
	}
	nc = tune(nc)
	conncap.DialConnected(ctx) // a slow handshake from here on is a busy peer (ErrHelloLate)
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
			return nil, fmt.Errorf("%w: with %s: %w%s", ErrTLS, addr, err, tlsHint(err))
		}
		nc = tc
	}
	// The Hello exchange is where a TLS 1.3 client first hears that the
	// server rejected its certificate. ctx ends it early by expiring the
	// socket's deadline.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	peer, fr, err := handshake(nc, t.cfg.Config, t.cfg.HandshakeTimeout, t.g)
	if !stop() && err == nil {
		err = context.Cause(ctx) // the deadline may have hit the new stream
	}
	if err != nil {
		nc.Close()
		return nil, dialHelloError(addr, err, t.clientTLS != nil)
	}
	return newStream(nc, fr, peer, t.cfg.Config, h, t.g, t.cfg.IdleTimeout/2, nil), nil
}

// dialHelloError names why the Hello exchange of a dial failed: TLS, a
// protocol mismatch, or the connection itself.
func dialHelloError(addr string, err error, usesTLS bool) error {
	var op *net.OpError
	switch {
	case errors.Is(err, ErrTLS), errors.Is(err, ErrAtLimit):
		return fmt.Errorf("hello exchange with %s: %w", addr, err)
	case usesTLS && errors.As(err, &op) && op.Op == "remote error":
		// A TLS 1.3 server reports a rejected client certificate
		// with an alert after the client's handshake has finished.
		return fmt.Errorf("%w: %s rejected this node: %w", ErrTLS, addr, err)
	case errors.Is(err, ErrNotRPC):
		return fmt.Errorf("%w: %s: %w", ErrProtocol, addr, err)
	case frame.IsInvalid(err):
		return fmt.Errorf("%w: hello exchange with %s: %w", ErrProtocol, addr, err)
	case !usesTLS && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("%w: hello exchange with %s: the peer closed the connection before its hello, "+
			"as a node at its connection or handshake limit does, or a TLS listener with a plaintext client "+
			"(set ClientTLS if the peer uses TLS): %w", ErrRefused, addr, err)
	}
	return fmt.Errorf("%w: hello exchange with %s: %w", ErrRefused, addr, err)
}

// tlsHint explains the TLS error of a peer that does not speak TLS.
func tlsHint(err error) string {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return " (the peer does not speak TLS: configure TLS on both ends or on neither)"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return " (the peer closed the connection: it may not speak TLS)"
	}
	return ""
}

// Listen accepts connections at addr ("host:port"; port 0 picks one).
// Without TLS it refuses, with ErrInsecureListen, any address that is not
// loopback, unless AllowPlaintext is set.
func (t *TCP) Listen(addr string, h ConnHandler) (Listener, error) {
	if err := t.checkPlaintext(addr); err != nil {
		return nil, err
	}
	lc := net.ListenConfig{KeepAlive: t.cfg.KeepAlive}
	nl, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	l := &tcpListener{t: t, nl: nl, h: h, done: make(chan struct{}), atLimit: make(chan struct{}, maxAtLimitHellos)}
	if l.atLimitHello, err = frame.Append(nil, hello(t.cfg.Config, frame.Caps|frame.CapAtLimit), t.cfg.MaxFrameSize); err != nil {
		nl.Close()
		return nil, err
	}
	l.wg.Add(1)
	// The accept loop: it owns nl's accepting and the pacer.
	go l.acceptLoop()
	return l, nil
}

// checkPlaintext refuses a plaintext listener that other machines can reach.
func (t *TCP) checkPlaintext(addr string) error {
	if t.serverTLS != nil || t.cfg.AllowPlaintext {
		return nil
	}
	loop, err := IsLoopback(addr)
	if err != nil {
		return fmt.Errorf("transport: listen address %q: %w", addr, err)
	}
	if !loop {
		return fmt.Errorf("%w: %s would take writes from anyone who can reach it: "+
			"set TCPConfig.TLS (with ClientAuth for mutual TLS), "+
			"or set TCPConfig.AllowPlaintext on a network you trust", ErrInsecureListen, addr)
	}
	return nil
}

// IsLoopback reports whether every address the host of addr ("host:port")
// may stand for is a loopback one. An empty host means every interface.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// tune sets up a TCP connection the node dialed or accepted: no delay
// for small frames, and the raw socket calls of wrapTCP.
func tune(nc net.Conn) net.Conn {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return wrapTCP(nc)
}

// tcpListener is a Listener of a TCP transport. Its goroutines: the accept
// loop (acceptLoop), a handshake per accepted connection (serve), which
// becomes the connection's stream, and a teller per connection refused at
// the limit (tellAtLimit).
type tcpListener struct {
	// Set by Listen and not changed after.
	t  *TCP
	nl net.Listener
	h  ConnHandler

	once sync.Once
	done chan struct{}  // closed by Close
	wg   sync.WaitGroup // the accept loop and handshakes in progress
	// atLimit holds a token per connection being told that the node is
	// at its connection limit (refuseAtLimit).
	atLimit chan struct{}
	// atLimitHello is the Hello that says so, encoded once by Listen
	// (nil: a connection past a limit is closed unexplained).
	atLimitHello []byte
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
	g := l.t.g
	p := pacer{slots: g.shakes, wait: l.t.cfg.HandshakeWait, rate: l.t.rate, g: g, addr: l.Addr(), done: l.done, shed: newShedder(l.nl, l.tellShedFD)}
	var delay time.Duration
	for {
		slot, stop := p.before()
		if stop {
			return
		}
		nc, err := l.nl.Accept()
		if err != nil {
			if slot {
				g.shakes.put()
			}
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
		if !p.after(nc, slot) {
			l.refuseShed(nc)
			continue
		}
		if !g.admit() {
			g.shakes.put()
			g.refuse(refusedConnLimit, nc.RemoteAddr().String(), "",
				fmt.Errorf("%w: %d connections open, limit %d (TCPConfig.MaxConns)", ErrOverloaded, g.conns.Load(), g.maxConns))
			l.refuseAtLimit(nc)
			continue
		}
		g.shakes.begin()
		l.wg.Add(1)
		// The handshake of nc: it owns nc, a handshake slot and a
		// connection slot, and hands them to the stream it starts.
		go l.serve(nc)
	}
}

// maxAtLimitHellos bounds the connections being told, at once, that the
// node is at its connection limit by a teller, which waits for the
// dialer's Hello before it closes; past it they are told in passing
// (tellInPassing).
const maxAtLimitHellos = 32

// atLimitLinger bounds how long such a connection is kept open after its
// Hello, for the dialer's own Hello to arrive: closing with bytes unread
// resets the connection, and the dialer could lose the Hello that tells it
// why.
const atLimitLinger = 200 * time.Millisecond

// refuseShed closes nc, shed at the handshake limit or the accept rate.
// Without TLS it is told first that the node is at its limit, as a
// connection past MaxConns is: a node shedding a storm of dials is busy,
// and its honest dialers must not suspect it. With TLS, where saying so
// would cost the very handshake the limit saves, it is closed unexplained.
func (l *tcpListener) refuseShed(nc net.Conn) {
	if l.t.serverTLS != nil {
		nc.Close()
		return
	}
	l.refuseAtLimit(nc)
}

// refuseAtLimit tells the dialer of nc, accepted past the connection
// limit, that the node is at its limit (a Hello with CapAtLimit), then
// closes it: the dialer reports a busy node, not a dead one. It never
// blocks the accept loop, and takes no connection slot.
func (l *tcpListener) refuseAtLimit(nc net.Conn) {
	select {
	case l.atLimit <- struct{}{}:
	default:
		l.tellInPassing(nc)
		return
	}
	l.tellAtLimit(nc)
}

// tellInPassing tells the dialer of nc that the node is at its limit
// without a teller, when maxAtLimitHellos are busy (a storm of dials at a
// node at its limit): one write, which a connection's empty send buffer
// takes at once, what the dialer sent already read without waiting
// (closing with bytes unread resets the connection, and the reset may
// reach the dialer before the node's Hello), then the close; on Linux
// on the descriptor itself (tellConnInPassing), elsewhere with a write
// deadline. A dialer's Hello that arrives between the read and the close
// still resets it.
// A connection closed unexplained looked like a node that is gone, and
// its dialer suspected a busy node for seconds. Without TLS only (with
// TLS, saying so costs the handshake that shedding saves).
func (l *tcpListener) tellInPassing(nc net.Conn) {
	if l.t.serverTLS == nil && l.atLimitHello != nil {
		if !tellConnInPassing(nc, l.atLimitHello) {
			nc.SetWriteDeadline(time.Now().Add(atLimitWrite))
			nc.Write(l.atLimitHello)
		}
	}
	nc.Close()
}

// atLimitWrite bounds the write of a Hello told in passing: it never
// waits for the network, and the accept loop waits for it.
const atLimitWrite = 10 * time.Millisecond

// tellShedFD tells the dialer of fd, a connection the shedder took from
// the backlog, that the node is at its limit, as refuseShed does: by a
// teller while fewer than maxAtLimitHellos are being told, in passing
// otherwise. It reports whether it took fd (closing it is then its
// business).
func (l *tcpListener) tellShedFD(fd int) bool {
	if l.t.serverTLS != nil {
		return false
	}
	select {
	case l.atLimit <- struct{}{}:
	default:
		tellFDInPassing(fd, l.atLimitHello)
		return false
	}
	f := os.NewFile(uintptr(fd), "shed")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		<-l.atLimit
		return true
	}
	l.tellAtLimit(nc)
	return true
}

// tellAtLimit starts the teller of nc, accepted past a limit; the caller
// holds one of atLimit's tokens for it.
func (l *tcpListener) tellAtLimit(nc net.Conn) {
	l.wg.Add(1)
	// The teller: it owns nc and the caller's atLimit token.
	go l.sayAtLimit(nc)
}

// sayAtLimit is the teller of nc: it sends nc's dialer the Hello that says
// the node is at its limit, closes nc, and gives its atLimit token back.
func (l *tcpListener) sayAtLimit(nc net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.atLimit }()
	defer nc.Close()
	cfg := l.t.cfg
	deadline := time.Now().Add(min(cfg.HandshakeTimeout, time.Second))
	nc.SetDeadline(deadline)
	if l.t.serverTLS != nil {
		tc := tls.Server(nc, l.t.serverTLS)
		if err := tc.Handshake(); err != nil {
			return
		}
		nc = tc
	}
	if _, err := nc.Write(l.atLimitHello); err != nil {
		return
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	nc.SetReadDeadline(time.Now().Add(atLimitLinger))
	io.CopyN(io.Discard, nc, 16<<10)
}

// serve runs the handshakes of one accepted connection, which holds one of
// the node's handshake slots until they end and one of its connection
// slots until it ends.
func (l *tcpListener) serve(nc net.Conn) {
	defer l.wg.Done()
	g := l.t.g
	shaking := true
	defer func() {
		if shaking {
			g.shakes.end()
		}
	}()
	nc = tune(nc)
	cfg := l.t.cfg
	addr := nc.RemoteAddr().String()
	if l.t.serverTLS != nil {
		tc := tls.Server(nc, l.t.serverTLS)
		ctx, cancel := context.WithTimeout(context.Background(), cfg.HandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			var rh tls.RecordHeaderError
			if errors.As(err, &rh) && rh.Conn != nil {
				// A plaintext client sent a Hello. Answer with a TLS
				// alert record, which it can recognize, so that it
				// reports a TLS mismatch rather than a closed
				// connection.
				rh.Conn.SetWriteDeadline(time.Now().Add(cfg.HandshakeTimeout))
				rh.Conn.Write(plaintextAlert)
				err = fmt.Errorf("%w: the client does not speak TLS: %w", ErrTLS, err)
			} else {
				err = fmt.Errorf("%w: %w", ErrTLS, err)
			}
			g.refuse(refusedTLS, addr, "", err)
			nc.Close()
			g.leave()
			return
		}
		nc = tc
	}
	peer, fr, err := handshake(nc, cfg.Config, cfg.HandshakeTimeout, g)
	if err != nil {
		kind := refusedHandshake
		if errors.Is(err, ErrTLS) {
			kind = refusedTLS
			// Read the rest of the TLS client's hello before closing:
			// closing with bytes unread resets the connection, and the
			// client would lose the Hello that tells it this side is
			// plaintext.
			nc.SetReadDeadline(time.Now().Add(tlsDrainTimeout))
			io.CopyN(io.Discard, nc, 16<<10)
		}
		g.refuse(kind, addr, "", err)
		nc.Close()
		g.leave()
		return
	}
	shaking = false
	g.shakes.end()
	newStream(nc, fr, peer, cfg.Config, l.h, g, cfg.IdleTimeout, g.leave)
}

// tlsDrainTimeout bounds the wait for the rest of a TLS client's hello on a
// plaintext listener.
const tlsDrainTimeout = 100 * time.Millisecond

// plaintextAlert is a TLS 1.2 record holding a fatal protocol_version alert.
var plaintextAlert = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46}
