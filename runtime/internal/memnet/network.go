// Package memnet is the in-memory transport that tests run on: a Network
// makes connected transports in one process, each identified by the
// transport.Config.Node it was created with, and can inject faults between
// them (faults.go). Frames really go through frame.Append and a
// per-connection frame.Decoder, so the wire format is exercised and no
// memory is shared between the two ends. It is internal: tests of services
// reach it through runtime/fftest, which builds clusters on it.
//
// It is built for testing/synctest: every goroutine it starts blocks only on
// channels and timers, so a bubble's fake clock drives heartbeats, delays and
// timeouts deterministically. Create the network inside the bubble and close
// it before the bubble ends, so that no goroutine is left behind:
//
//	synctest.Test(t, func(t *testing.T) {
//		net := memnet.NewNetwork()
//		defer net.Close() // ends every connection: no goroutine outlives the bubble
//		srv := net.Transport(transport.Config{Node: "a1", Group: "a"})
//		cli := net.Transport(transport.Config{Node: "b1", Group: "b"})
//		srv.Listen("a1", serverHandler)
//		c, _ := cli.Dial(t.Context(), "a1", clientHandler)
//		net.Pause("a1")         // a1 stops: frames to and from it are held
//		c.Send(attempt)
//		time.Sleep(time.Second) // fake time: returns at once
//		net.Resume("a1")        // the held frames arrive, in order
//		synctest.Wait()         // let the handlers run
//	})
//
// Outside a bubble it works the same on the real clock.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// errMemPeerClosed is the reason an end gets when its peer closed the
// connection.
var errMemPeerClosed = fmt.Errorf("%w by the peer", transport.ErrClosed)

// Network is an in-process network of Transports with switchable
// faults. The zero value is not usable; call NewNetwork. Its methods are
// safe for concurrent use.
type Network struct {
	mu        sync.Mutex
	closed    bool
	listeners map[string]*memListener // by address
	conns     map[*memConn]struct{}
	memFaults // guarded by mu
	// changed is closed and replaced whenever a fault or listener changes,
	// waking held deliveries and waiting dials to look again.
	changed chan struct{}
}

// NewNetwork returns an empty network with no faults. Random drops are
// seeded with 1; see Seed.
func NewNetwork() *Network {
	n := &Network{
		listeners: make(map[string]*memListener),
		conns:     make(map[*memConn]struct{}),
		changed:   make(chan struct{}),
	}
	n.memFaults.init()
	return n
}

// Transport returns a transport for the node cfg.Node. Faults name nodes, so
// give every node a distinct name; two transports with the same name (a
// restarted node, say) share that node's faults.
func (n *Network) Transport(cfg transport.Config) *Transport {
	return &Transport{n: n, cfg: cfg.WithDefaults()}
}

// Close tears the whole network down: every listener closes, every
// connection ends with transport.ErrClosed on both ends (even on a paused node), and
// waiting dials return transport.ErrClosed. The delivery goroutines exit once their
// handlers' HandleClose calls return. Close is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	for c := range n.conns {
		c.abortLocked(transport.ErrClosed, transport.ErrClosed)
	}
	for addr, ln := range n.listeners {
		ln.closed = true
		delete(n.listeners, addr)
	}
	n.broadcastLocked()
	return nil
}

// broadcastLocked wakes everyone waiting for the network's state to change.
func (n *Network) broadcastLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// resetLocked aborts every connection for which match is true: the end on
// node local gets localErr, the other end transport.ErrReset. It returns how many
// connections it aborted.
func (n *Network) resetLocked(match func(c *memConn) bool, localErr func(e *memEnd) error) int {
	count := 0
	for c := range n.conns {
		if !match(c) {
			continue
		}
		c.abortLocked(localErr(&c.ends[0]), localErr(&c.ends[1]))
		count++
	}
	return count
}

// Transport is one node's endpoint on a Network. It implements
// Transport.
type Transport struct {
	n         *Network
	cfg       transport.Config
	closed    bool                      // guarded by n.mu
	listeners map[*memListener]struct{} // guarded by n.mu
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Listener  = (*memListener)(nil)
	_ conncap.StatsConn   = (*memEnd)(nil)
)

// Node returns the name this transport's node is known by.
func (t *Transport) Node() string { return t.cfg.Node }

// Listen accepts connections at addr; the empty address means the node's
// name. Connections dialed to addr belong to this transport's node, so the
// node's faults apply to them.
func (t *Transport) Listen(addr string, h transport.ConnHandler) (transport.Listener, error) {
	if h == nil {
		return nil, errors.New("transport: Listen with a nil Handler")
	}
	if addr == "" {
		addr = t.cfg.Node
	}
	n := t.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || t.closed {
		return nil, fmt.Errorf("transport: listen %q: %w", addr, transport.ErrClosed)
	}
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("transport: listen %q: address already in use", addr)
	}
	ln := &memListener{t: t, addr: addr, h: h}
	n.listeners[addr] = ln
	if t.listeners == nil {
		t.listeners = make(map[*memListener]struct{})
	}
	t.listeners[ln] = struct{}{}
	n.broadcastLocked()
	return ln, nil
}

// Dial connects to the listener at addr. It fails at once with transport.ErrRefused if
// nothing listens there. While either node is paused, a link between them
// is cut or its dials are blocked (BlockDials) it waits, as a TCP
// handshake would, until the fault goes or ctx ends; delays on the links
// add their round trip to the dial.
func (t *Transport) Dial(ctx context.Context, addr string, h transport.ConnHandler) (transport.Conn, error) {
	if h == nil {
		return nil, errors.New("transport: Dial with a nil Handler")
	}
	n := t.n
	waitedRTT := false
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("transport: dial %q: %w", addr, err)
		}
		n.mu.Lock()
		if n.closed || t.closed {
			n.mu.Unlock()
			return nil, fmt.Errorf("transport: dial %q: %w", addr, transport.ErrClosed)
		}
		ln := n.listeners[addr]
		if ln == nil {
			n.mu.Unlock()
			return nil, fmt.Errorf("transport: dial %q: %w", addr, transport.ErrRefused)
		}
		from, to := t.cfg.Node, ln.t.cfg.Node
		var wait <-chan struct{}
		var sleep time.Duration
		if n.pausedLocked(from) || n.pausedLocked(to) || n.dialBlockedLocked(from, to) {
			wait = n.changed
		} else if rtt := n.delayLocked(from, to) + n.delayLocked(to, from); rtt > 0 && !waitedRTT {
			sleep = rtt
		} else {
			e, err := n.connectLocked(t, h, ln)
			n.mu.Unlock()
			return e, err
		}
		n.mu.Unlock()
		if sleep > 0 {
			waitedRTT = true
			timer := time.NewTimer(sleep)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
			}
			continue
		}
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
}

// connectLocked makes the connection: each side's frame.Hello is encoded with the
// sender's limit and decoded with the receiver's, as on a real wire.
func (n *Network) connectLocked(t *Transport, h transport.ConnHandler, ln *memListener) (*memEnd, error) {
	dialerHello, err := memExchangeHello(t, ln.t)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %q: %w", ln.addr, err)
	}
	listenerHello, err := memExchangeHello(ln.t, t)
	if err != nil {
		return nil, fmt.Errorf("transport: dial %q: %w", ln.addr, err)
	}
	c := &memConn{n: n}
	d, l := &c.ends[0], &c.ends[1]
	d.conn, d.t, d.h, d.peer = c, t, h, *listenerHello
	l.conn, l.t, l.h, l.peer = c, ln.t, ln.h, *dialerHello
	c.pipes[0] = memPipe{from: d, to: l, notify: make(chan struct{}, 1)}
	c.pipes[1] = memPipe{from: l, to: d, notify: make(chan struct{}, 1)}
	d.out, l.in = &c.pipes[0], &c.pipes[0]
	l.out, d.in = &c.pipes[1], &c.pipes[1]
	c.live = 2
	n.conns[c] = struct{}{}
	go c.pipes[0].run()
	go c.pipes[1].run()
	return d, nil
}

func memExchangeHello(from, to *Transport) (*frame.Hello, error) {
	buf, err := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: from.cfg.Node, Group: from.cfg.Group, MaxFrame: uint32(from.cfg.MaxFrameSize), Revision: frame.Revision}, from.cfg.MaxFrameSize)
	if err != nil {
		return nil, err
	}
	f, err := memDecode(new(frame.Decoder), buf, to.cfg.MaxFrameSize)
	if err != nil {
		return nil, err
	}
	hello, ok := f.(*frame.Hello)
	if !ok {
		return nil, fmt.Errorf("%w: expected hello, got %s", transport.ErrMalformedFrame, f.Type())
	}
	return hello, nil
}

// memDecode decodes one length-prefixed frame, checking the prefix against
// the receiver's limit first, as a stream reader does.
func memDecode(d *frame.Decoder, buf []byte, max int) (frame.Frame, error) {
	if len(buf) < 4 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a length prefix", transport.ErrMalformedFrame, len(buf))
	}
	size, err := frame.Len(buf, max)
	if err != nil {
		return nil, err
	}
	if size != len(buf)-4 {
		return nil, fmt.Errorf("%w: length prefix says %d bytes, frame has %d", transport.ErrMalformedFrame, size, len(buf)-4)
	}
	return d.Decode(buf[4:])
}

// Close closes every listener of this transport and ends its connections,
// as if the node went down: its own ends get transport.ErrClosed, their peers
// transport.ErrReset, and dials to its addresses are refused. It is idempotent.
func (t *Transport) Close() error {
	n := t.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	for ln := range t.listeners {
		ln.closeLocked()
	}
	n.resetLocked(
		func(c *memConn) bool { return c.ends[0].t == t || c.ends[1].t == t },
		func(e *memEnd) error {
			if e.t == t {
				return transport.ErrClosed
			}
			return transport.ErrReset
		})
	n.broadcastLocked()
	return nil
}

type memListener struct {
	t      *Transport
	addr   string
	h      transport.ConnHandler
	closed bool // guarded by t.n.mu
}

func (l *memListener) Addr() string { return l.addr }

// Close stops accepting: dials to the address are refused from now on.
// Connections already made stay open.
func (l *memListener) Close() error {
	n := l.t.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closeLocked()
	n.broadcastLocked()
	return nil
}

func (l *memListener) closeLocked() {
	n := l.t.n
	l.closed = true
	if n.listeners[l.addr] == l {
		delete(n.listeners, l.addr)
	}
	delete(l.t.listeners, l)
}

// memConn is a connection: two ends and a pipe per direction. All its state
// is guarded by the network's mutex.
type memConn struct {
	n      *Network
	ends   [2]memEnd  // dialer, listener
	pipes  [2]memPipe // dialer to listener, listener to dialer
	closed bool       // either end closed or the connection was aborted: Send fails
	live   int        // delivery goroutines still running
}

// abortLocked ends the connection at once, discarding queued frames: the
// dialer's handler gets dialerErr, the listener's listenerErr.
func (c *memConn) abortLocked(dialerErr, listenerErr error) {
	c.closed = true
	c.pipes[1].abortLocked(dialerErr)
	c.pipes[0].abortLocked(listenerErr)
}

// memEnd is one end of a memConn; it is the transport.Conn its handler sees.
type memEnd struct {
	conn        *memConn
	t           *Transport
	h           transport.ConnHandler
	peer        frame.Hello
	out, in     *memPipe
	closeCalled bool // guarded by conn.n.mu

	framesSent, framesReceived atomic.Uint64
	bytesSent, bytesReceived   atomic.Uint64
	queueFull                  atomic.Uint64
}

func (e *memEnd) Peer() frame.Hello { return e.peer }

func (e *memEnd) String() string { return e.t.cfg.Node + "->" + e.peer.Node }

// Stats reports what this end did. Every accepted Send is one write, so
// Writes equals FramesSent; frames lost to a cut or a drop count as sent.
func (e *memEnd) Stats() conncap.Stats {
	sent := e.framesSent.Load()
	return conncap.Stats{
		FramesSent:     sent,
		FramesReceived: e.framesReceived.Load(),
		BytesSent:      e.bytesSent.Load(),
		BytesReceived:  e.bytesReceived.Load(),
		Writes:         sent,
		QueueFull:      e.queueFull.Load(),
	}
}

// Send encodes f and queues it for the peer. Faults act here: a frame on a
// cut link or picked by a drop is lost silently, and a delay fixes the
// frame's arrival time. Pause acts on delivery (the frame waits in the
// queue), so a paused peer fills the queue until Send returns transport.ErrQueueFull.
func (e *memEnd) Send(f frame.Frame) error {
	if f == nil {
		return fmt.Errorf("%w: nil frame", transport.ErrMalformedFrame)
	}
	bp := memGetBuf()
	limit := e.t.cfg.MaxFrameSize
	if m := int(e.peer.MaxFrame); m > 0 && m < limit {
		limit = m // as a stream does: the peer would close on a larger one
	}
	buf, err := frame.Append((*bp)[:0], f, limit)
	*bp = buf
	if err != nil {
		memPutBuf(bp)
		return err
	}
	n := e.conn.n
	n.mu.Lock()
	if e.conn.closed {
		n.mu.Unlock()
		memPutBuf(bp)
		return transport.ErrClosed
	}
	p := e.out
	if p.queued+len(buf) > e.t.cfg.SendQueueBytes {
		queued := p.queued
		n.mu.Unlock()
		memPutBuf(bp)
		e.queueFull.Add(1)
		return fmt.Errorf("%w: %d bytes queued to %s, limit %d", transport.ErrQueueFull, queued, e.peer.Node, e.t.cfg.SendQueueBytes)
	}
	e.framesSent.Add(1)
	e.bytesSent.Add(uint64(len(buf)))
	from, to := e.t.cfg.Node, e.peer.Node
	if n.loseLocked(from, to) {
		n.mu.Unlock()
		memPutBuf(bp)
		return nil
	}
	p.push(memItem{buf: bp, at: time.Now().Add(n.delayLocked(from, to))})
	n.mu.Unlock()
	p.wake()
	return nil
}

// Close closes this end: its handler gets HandleClose(nil) at once (after
// the frame it may be handling), frames already sent are still delivered to
// the peer, then the peer's handler gets an error matching transport.ErrClosed.
// Close is idempotent.
func (e *memEnd) Close() error {
	n := e.conn.n
	n.mu.Lock()
	if e.closeCalled {
		n.mu.Unlock()
		return nil
	}
	e.closeCalled = true
	e.conn.closed = true
	e.in.abortLocked(nil)
	e.out.eof = true
	n.mu.Unlock()
	e.out.wake()
	return nil
}

// memItem is one encoded frame in flight.
type memItem struct {
	buf *[]byte
	at  time.Time // deliver no earlier than this
}

// memPipe carries one direction of a connection. One goroutine (run)
// delivers its frames to the receiving end's handler, then that handler's
// HandleClose. Fields other than notify are guarded by the network's mutex.
type memPipe struct {
	from, to *memEnd
	q        []memItem
	head     int // q[head:] is pending
	queued   int // bytes in q[head:]
	eof      bool
	aborted  bool
	abortErr error
	notify   chan struct{} // capacity 1: new frames or a close to look at
}

func (p *memPipe) push(it memItem) {
	if p.head > 0 && p.head == len(p.q) {
		p.q, p.head = p.q[:0], 0
	}
	p.q = append(p.q, it)
	p.queued += len(*it.buf)
}

func (p *memPipe) pop() memItem {
	it := p.q[p.head]
	p.q[p.head] = memItem{}
	p.head++
	p.queued -= len(*it.buf)
	if p.head == len(p.q) {
		p.q, p.head = p.q[:0], 0
	}
	return it
}

func (p *memPipe) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// abortLocked makes the pipe end with err, discarding what is queued. The
// first reason wins.
func (p *memPipe) abortLocked(err error) {
	if p.aborted {
		return
	}
	p.aborted, p.abortErr = true, err
	for p.head < len(p.q) {
		memPutBuf(p.pop().buf)
	}
	p.wake()
}

// memStep is what the delivery goroutine does next.
type memStep struct {
	buf   *[]byte         // deliver this frame
	close bool            // or deliver HandleClose(err) and exit
	err   error           //
	wait  <-chan struct{} // or wait for this, p.notify or after
	after time.Duration   // if > 0
}

// nextLocked decides the next step. A paused node neither sends nor
// receives, not even the news that a connection ended, until it resumes or
// the network closes.
func (p *memPipe) nextLocked() memStep {
	n := p.from.conn.n
	toPaused := !n.closed && n.pausedLocked(p.to.t.cfg.Node)
	if p.aborted {
		if toPaused {
			return memStep{wait: n.changed}
		}
		return memStep{close: true, err: p.abortErr}
	}
	if toPaused || n.pausedLocked(p.from.t.cfg.Node) {
		return memStep{wait: n.changed}
	}
	if p.head < len(p.q) {
		if d := time.Until(p.q[p.head].at); d > 0 {
			return memStep{wait: n.changed, after: d}
		}
		return memStep{buf: p.pop().buf}
	}
	if p.eof {
		return memStep{close: true, err: errMemPeerClosed}
	}
	return memStep{wait: n.changed}
}

// run delivers the pipe's frames in order, then HandleClose, then exits.
func (p *memPipe) run() {
	n := p.from.conn.n
	to := p.to
	var dec frame.Decoder
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// As a stream's reader does, tell the handler where a batch of frames
	// ends: when no more are due now.
	be, _ := to.h.(conncap.BatchEnder)
	inBatch := false
	for {
		n.mu.Lock()
		s := p.nextLocked()
		if s.buf == nil && inBatch && be != nil {
			n.mu.Unlock()
			be.HandleBatchEnd()
			inBatch = false
			continue // what arrived meanwhile
		}
		if s.close {
			to.conn.closed = true
			if to.conn.live--; to.conn.live == 0 {
				delete(n.conns, to.conn)
			}
			n.mu.Unlock()
			to.h.HandleClose(to, s.err)
			return
		}
		n.mu.Unlock()
		if s.buf != nil {
			p.deliver(&dec, s.buf)
			inBatch = true
			continue
		}
		var fire <-chan time.Time
		if s.after > 0 {
			timer.Reset(s.after)
			fire = timer.C
		}
		select {
		case <-p.notify:
		case <-s.wait:
		case <-fire:
		}
		if s.after > 0 {
			timer.Stop()
		}
	}
}

// deliver decodes one frame with the receiver's limit and hands it to the
// receiver's handler. A frame that does not decode ends the connection, as
// a bad frame on a stream does: the receiver gets the decoding error and the
// sender transport.ErrReset.
func (p *memPipe) deliver(dec *frame.Decoder, bp *[]byte) {
	defer memPutBuf(bp)
	to := p.to
	f, err := memDecode(dec, *bp, to.t.cfg.MaxFrameSize)
	if err != nil {
		to.t.cfg.Logger.Warn("transport: bad frame, closing connection",
			"node", to.t.cfg.Node, "peer", to.peer.Node, "err", err)
		n := to.conn.n
		n.mu.Lock()
		to.conn.closed = true
		p.abortLocked(err)
		to.out.abortLocked(transport.ErrReset)
		n.mu.Unlock()
		return
	}
	to.framesReceived.Add(1)
	to.bytesReceived.Add(uint64(len(*bp)))
	to.h.HandleFrame(to, f)
}

// memBufs recycles frame buffers once the receiver's HandleFrame returns,
// so a handler that keeps a frame's bytes without copying them sees them
// change, as it would over a stream.
var memBufs = sync.Pool{New: func() any { return new([]byte) }}

func memGetBuf() *[]byte { return memBufs.Get().(*[]byte) }

func memPutBuf(bp *[]byte) {
	if cap(*bp) > 64<<10 {
		return // keep big payloads from pinning memory
	}
	memBufs.Put(bp)
}
