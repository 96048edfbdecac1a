package transport

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
)

// pipeListener is a net.Listener over net.Pipe whose backlog holds
// nothing: dial returns once the node has accepted the connection, so a
// test sees when the node took it.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// dial connects and waits until the node accepts.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	t.Helper()
	peer, node := net.Pipe()
	t.Cleanup(func() { peer.Close() })
	l.conns <- node
	return peer
}

// listenPipe runs tr's accept loop over a pipeListener.
func listenPipe(t *testing.T, tr *TCP, h ConnHandler) *pipeListener {
	pl := newPipeListener()
	l := &tcpListener{t: tr, nl: pl, h: h, done: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	t.Cleanup(func() { l.Close() })
	return pl
}

// greet does a peer's half of the Hello exchange on c.
func greet(c net.Conn) error {
	b, _ := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "peer", Group: "g"}, 0)
	written := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		written <- err
	}()
	_, err := readHello(newFrameReader(c, DefaultMaxFrameSize, nil))
	return errors.Join(err, <-written)
}

// pacedTCP is a transport with two handshake slots, a wait of 100 ms for
// one, and handshakes that do not time out under the tests.
func pacedTCP(t *testing.T) *TCP {
	return newTCP(t, "node", func(c *TCPConfig) {
		c.MaxHandshakes, c.HandshakeWait, c.HandshakeTimeout = 2, 100*time.Millisecond, time.Hour
	})
}

// With every handshake slot taken, the node stops accepting; a slot that
// frees within HandshakeWait goes to the connection that was held back,
// which then completes its handshake.
func TestPaceHoldsBackUntilASlotFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := pacedTCP(t)
		rec := newRecorder()
		l := listenPipe(t, tr, rec)
		slow := l.dial(t)
		l.dial(t)
		synctest.Wait()
		if st := tr.NodeStats(); st.Handshakes != 2 || st.Paced != 1 {
			t.Fatalf("node stats %+v, want both slots taken and accepting paused", st)
		}
		start := time.Now()
		held := make(chan net.Conn, 1)
		go func() { held <- l.dial(t) }()
		time.Sleep(60 * time.Millisecond)
		synctest.Wait()
		select {
		case <-held:
			t.Fatal("a connection was accepted while every handshake slot was taken")
		default:
		}
		if err := greet(slow); err != nil {
			t.Fatal(err)
		}
		c := <-held
		if waited := time.Since(start); waited != 60*time.Millisecond {
			t.Errorf("the held-back connection was accepted after %v, want 60ms, when the slot freed", waited)
		}
		if err := greet(c); err != nil {
			t.Fatalf("hello exchange of the held-back connection: %v", err)
		}
		synctest.Wait()
		st := tr.NodeStats()
		if st.Paced != 2 || st.HandshakeLimit != 0 || st.Handshakes != 1 || st.Conns != 3 {
			t.Errorf("node stats %+v, want accepting paused twice, nothing refused, one handshake left of three connections", st)
		}
	})
}

// When no slot frees within HandshakeWait the node sheds: it closes every
// new connection as soon as it accepts it, before reading a byte or
// writing its Hello, until a slot frees; then it takes connections again.
func TestPaceShedsWhenNoSlotFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := pacedTCP(t)
		l := listenPipe(t, tr, newRecorder())
		slow := l.dial(t)
		l.dial(t)
		synctest.Wait()
		start := time.Now()
		shed := l.dial(t)
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Errorf("the connection past the limit was accepted after %v, want HandshakeWait, 100ms", waited)
		}
		// While shedding, no further wait.
		time.Sleep(time.Second)
		start = time.Now()
		shed2 := l.dial(t)
		if waited := time.Since(start); waited != 0 {
			t.Errorf("while shedding, a connection waited %v to be accepted, want none", waited)
		}
		for _, c := range []net.Conn{shed, shed2} {
			if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("read on a shed connection: %d bytes, %v; want EOF before any byte", n, err)
			}
			if _, err := c.Write([]byte{0}); !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("write to a shed connection: %v, want it closed unread", err)
			}
		}
		st := tr.NodeStats()
		if st.Paced != 1 || st.HandshakeLimit != 2 || st.Handshakes != 2 || st.Conns != 2 {
			t.Errorf("node stats %+v, want one paced accept, two refused at the handshake limit, two handshakes open", st)
		}
		if err := greet(slow); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the node has finished the handshake and freed its slot
		start = time.Now()
		c := l.dial(t)
		if err := greet(c); err != nil {
			t.Fatalf("hello exchange once a slot freed: %v", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("with a slot free, a connection waited %v, want none", waited)
		}
		if st := tr.NodeStats(); st.HandshakeLimit != 2 || st.Conns != 3 {
			t.Errorf("node stats %+v, want no further refusal once a slot freed", st)
		}
	})
}

// A slot freed while the accept loop sheds goes to the next connection
// even when that one was already waiting in Accept.
func TestPaceShedsOnlyWhileFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := pacedTCP(t)
		l := listenPipe(t, tr, newRecorder())
		slow := l.dial(t)
		l.dial(t)
		l.dial(t) // shed after the wait; the loop sheds from now on
		synctest.Wait()
		if err := greet(slow); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if err := greet(l.dial(t)); err != nil {
			t.Fatalf("hello exchange of the first connection after a slot freed: %v", err)
		}
		if st := tr.NodeStats(); st.HandshakeLimit != 1 {
			t.Errorf("HandshakeLimit = %d, want 1", st.HandshakeLimit)
		}
	})
}

// Connections refused at the handshake limit are logged at a bounded rate,
// like every refusal, and so is the pacing.
func TestPaceLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log testkit.LogBuffer
		tr := newTCP(t, "node", func(c *TCPConfig) {
			c.MaxHandshakes, c.HandshakeWait, c.HandshakeTimeout = 1, 100*time.Millisecond, time.Hour
			c.Logger = log.Logger()
		})
		l := listenPipe(t, tr, newRecorder())
		l.dial(t)
		for range 10 {
			l.dial(t)
		}
		synctest.Wait()
		out := log.String()
		logsOnce(t, out,
			"transport: pacing new connections: every handshake slot is taken",
			"transport: refused connection: handshake limit reached",
			"limit 1 (TCPConfig.MaxHandshakes)",
		)
		if st := tr.NodeStats(); st.HandshakeLimit != 10 {
			t.Errorf("HandshakeLimit = %d, want 10", st.HandshakeLimit)
		}
	})
}

// A storm of connections that never finish their handshake, far more than
// the handshake slots, over real sockets: the established connection's
// frames keep flowing while it lasts, the node holds at most MaxHandshakes
// of the storm, and closes every other one without starting a handshake
// (telling it that it is at its limit, when few enough are being told at
// once); once the storm ends, new connections are taken again.
func TestTCPHandshakeStormLeavesEstablishedAlone(t *testing.T) {
	const slots, storm = 8, 300
	tr := newTCP(t, "server", func(c *TCPConfig) {
		c.MaxHandshakes, c.HandshakeWait, c.HandshakeTimeout = slots, 20*time.Millisecond, time.Minute
	})
	srv := newRecorder()
	srv.echo = true
	l := listen(t, tr, srv)
	cli := newRecorder()
	honest := dial(t, newTCP(t, "client", nil), l.Addr(), cli)

	conns := make(chan net.Conn, storm)
	var dialers sync.WaitGroup
	for range 16 {
		dialers.Go(func() {
			for range storm / 16 {
				c, err := net.Dial("tcp", l.Addr())
				if err != nil {
					t.Error(err)
					return
				}
				t.Cleanup(func() { c.Close() })
				conns <- c
			}
		})
	}
	for i := range uint64(200) {
		if err := honest.Send(&frame.Attempt{Call: i, Service: "s", Method: "m", Payload: make([]byte, 100)}); err != nil {
			t.Fatalf("honest Send %d during the storm: %v", i, err)
		}
		if got := cli.next(t); got.f.(*frame.Attempt).Call != i {
			t.Fatalf("honest frame %d came back as %+v", i, got.f)
		}
		if st := tr.NodeStats(); st.Handshakes > slots {
			t.Fatalf("%d handshakes in progress, limit %d", st.Handshakes, slots)
		}
	}
	dialers.Wait()
	close(conns)
	n := storm / 16 * 16
	testkit.Until(t, "the storm past the slots refused", func() bool { return tr.NodeStats().HandshakeLimit == uint64(n-slots) })
	var greeted, shed, unexplained int
	for c := range conns {
		c.SetReadDeadline(time.Now().Add(waitLimit))
		hdr := make([]byte, 4)
		_, err := io.ReadFull(c, hdr)
		switch {
		case err == nil:
			body := make([]byte, binary.BigEndian.Uint32(hdr))
			if _, err := io.ReadFull(c, body); err != nil {
				t.Fatalf("a storm connection's Hello: %v", err)
			}
			if h, ok := mustDecode(t, body).(*frame.Hello); ok && h.Caps&frame.CapAtLimit != 0 {
				shed++ // told the node is at its limit, then closed
			} else {
				greeted++ // in a slot: the node sent its Hello
			}
		case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
			// Closed unexplained: its dialer would take a node that
			// is only busy for one that is gone.
			unexplained++
		default:
			t.Fatalf("a storm connection neither greeted nor closed: %v", err)
		}
	}
	if greeted != slots || shed != n-slots || unexplained != 0 {
		t.Errorf("%d storm connections got the node's Hello, %d were told it is at its limit and %d were closed without a word; want %d, %d and 0",
			greeted, shed, unexplained, slots, n-slots)
	}
	st := tr.NodeStats()
	if st.Handshakes != slots || st.Paced == 0 || st.Conns != slots+1 {
		t.Errorf("node stats %+v: want %d handshakes held, accepts paced, the honest connection and the held ones open", st, slots)
	}
	if err := honest.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatalf("honest connection after the storm: %v", err)
	}
	cli.next(t)
}

// Once the connections holding the slots go, a new dial gets in.
func TestTCPHandshakeSlotsComeBack(t *testing.T) {
	tr := newTCP(t, "server", func(c *TCPConfig) {
		c.MaxHandshakes, c.HandshakeWait, c.HandshakeTimeout = 2, 20*time.Millisecond, time.Minute
	})
	l := listen(t, tr, newRecorder())
	var holders []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		holders = append(holders, c)
	}
	testkit.Until(t, "both slots taken", func() bool { return tr.NodeStats().Handshakes == 2 })
	if _, err := tr.Dial(t.Context(), l.Addr(), newRecorder()); !errors.Is(err, ErrAtLimit) {
		t.Fatalf("dial with every slot held: %v, want ErrAtLimit (the node says it is at its limit)", err)
	}
	// The node counts a refusal once the connection is closed.
	testkit.Until(t, "the refusal counted", func() bool { return tr.NodeStats().HandshakeLimit == 1 })
	for _, c := range holders {
		c.Close()
	}
	testkit.Until(t, "the slots freed", func() bool { return tr.NodeStats().Handshakes == 0 })
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
}

// The defaults take an honest reconnect storm without pacing anyone out:
// 20 peers restarting at once, each dialing two connections over mutual
// TLS, all get in.
func TestTCPReconnectStormWithDefaults(t *testing.T) {
	const peers, perPeer = 20, 2
	ca := testkit.NewCA(t, "ca")
	// Generous handshake timeouts: 40 TLS handshakes at once under the race
	// detector on a busy machine take their time, and the test is about
	// the pacing, not the timeouts.
	srv := newRecorder()
	srv.echo = true
	l := listen(t, newTCP(t, "server", func(c *TCPConfig) {
		c.TLS = &tls.Config{
			Certificates: []tls.Certificate{ca.Issue(t, "server")},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca.Pool,
		}
		c.HandshakeTimeout = waitLimit
	}), srv)
	var wg sync.WaitGroup
	errs := make(chan error, peers*perPeer)
	for p := range peers {
		tr := newTCP(t, "peer", func(c *TCPConfig) {
			c.ClientTLS = &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Issue(t, "peer")}}
			c.DialTimeout, c.HandshakeTimeout = waitLimit, waitLimit
		})
		for range perPeer {
			wg.Go(func() {
				cli := newRecorder()
				c, err := tr.Dial(t.Context(), l.Addr(), cli)
				if err != nil {
					errs <- fmt.Errorf("peer %d: %w", p, err)
					return
				}
				defer c.Close()
				if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
					errs <- err
					return
				}
				cli.next(t)
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// logsOnce checks that each of lines appears in out exactly once: logged,
// and at most once a second.
func logsOnce(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, want := range lines {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%d log lines with %q, want 1 (at most one a second); log:\n%s", n, want, out)
		}
	}
}

// mustDecode decodes a frame's body (version onwards).
func mustDecode(t *testing.T, body []byte) frame.Frame {
	t.Helper()
	f, err := frame.Decode(body)
	if err != nil {
		t.Fatalf("decoding %x: %v", body, err)
	}
	return f
}
