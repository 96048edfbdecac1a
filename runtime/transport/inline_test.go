package transport

// Inline work and queued frames over loopback TCP. The tests assert what
// happens, not how soon: every wait is bounded by waitLimit only to turn a
// hang into a failure.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// The grace the tests lend the reader for: short for work that blocks, so
// that it is handed over at once, and long for work that does not, so
// that a busy machine cannot make it overrun and hand over too.
const (
	inlineGrace = time.Millisecond
	quickGrace  = time.Minute
)

// funcHandler runs frame for every frame and records each HandleClose.
type funcHandler struct {
	frame  func(c Conn, f frame.Frame)
	closes chan closed
	closed atomic.Int32
}

func newFuncHandler(frame func(c Conn, f frame.Frame)) *funcHandler {
	return &funcHandler{frame: frame, closes: make(chan closed, 8)}
}

func (h *funcHandler) HandleFrame(c Conn, f frame.Frame) { h.frame(c, f) }

func (h *funcHandler) HandleClose(c Conn, err error) {
	h.closed.Add(1)
	h.closes <- closed{c, err}
}

// work is inline work.
type work func()

func (w work) Run() { w() }

// goid is the calling goroutine's ID, which its stack trace starts with:
// it tells the read goroutines of one connection apart.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	var id uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// goroutineExists reports whether goroutine id is still running.
func goroutineExists(id uint64) bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	head := fmt.Appendf(nil, "goroutine %d [", id)
	return bytes.HasPrefix(buf, head) || bytes.Contains(buf, append([]byte("\n"), head...))
}

// handled is a frame a handler saw: its call, the goroutine that handled
// it, and what became of the work it lent that goroutine.
type handled struct {
	call   uint64
	g      uint64
	inline bool   // RunInline ran the work
	ranOn  uint64 // the goroutine the work ran on, if it ran inline
}

// Work that blocks the read goroutine is handed over: the frames behind it
// are read and handled by one new goroutine, in order, while it blocks;
// once it ends, its goroutine exits, and the new one is the only reader,
// through another handover and until the connection closes, which the
// handler hears of once.
func TestRunInlineHandsOverReading(t *testing.T) {
	frames := make(chan handled, 1024)
	blocked := make(chan uint64, 1)
	release := make(chan struct{}, 1)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		call := f.(*frame.Cancel).Call
		h := handled{call: call, g: goid()}
		var ranOn uint64
		w, grace := work(func() { ranOn = goid() }), quickGrace
		if call%100 == 0 {
			// Each round starts with work that blocks until released.
			w, grace = func() {
				ranOn = goid()
				blocked <- ranOn
				<-release
			}, inlineGrace
		}
		h.inline = c.(conncap.InlineConn).RunInline(w, grace)
		h.ranOn = ranOn
		frames <- h
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())

	send := func(call uint64) {
		t.Helper()
		if err := c.Send(&frame.Cancel{Call: call}); err != nil {
			t.Fatal(err)
		}
	}
	const behind = 50
	var reader uint64
	for round := range uint64(2) {
		first := round * 100
		send(first)
		old := testkit.Receive(t, blocked, "the blocking work to start")
		for i := first + 1; i <= first+behind; i++ {
			send(i)
		}
		// Every frame behind the blocked work is handled meanwhile, in
		// order, by one goroutine that is not the blocked one.
		reader = 0
		for i := first + 1; i <= first+behind; i++ {
			h := testkit.Receive(t, frames, fmt.Sprintf("frame %d while frame %d's work blocks", i, first))
			if h.call != i {
				t.Fatalf("handled frame %d, want %d", h.call, i)
			}
			if h.g == old {
				t.Fatalf("frame %d was handled by the goroutine its reading was handed over from", i)
			}
			if reader == 0 {
				reader = h.g
			}
			if h.g != reader {
				t.Fatalf("frame %d handled by goroutine %d, frame %d by %d: two goroutines read", i, h.g, first+1, reader)
			}
			if h.inline && h.ranOn != h.g {
				t.Fatalf("frame %d: inline work ran on goroutine %d, not on its reader %d", i, h.ranOn, h.g)
			}
		}
		release <- struct{}{}
		if h := testkit.Receive(t, frames, "the blocking frame to end"); h.call != first || h.g != old || !h.inline {
			t.Fatalf("after the release: %+v, want frame %d ended inline on goroutine %d", h, first, old)
		}
		testkit.Until(t, "the goroutine that handed the reading over to exit", func() bool { return !goroutineExists(old) })

		// The new reader reads on alone.
		for i := first + behind + 1; i < first+100; i++ {
			send(i)
		}
		for i := first + behind + 1; i < first+100; i++ {
			h := testkit.Receive(t, frames, fmt.Sprintf("frame %d after the release", i))
			if h.call != i || h.g != reader {
				t.Fatalf("handled %+v, want frame %d on goroutine %d", h, i, reader)
			}
		}
	}
	if n := len(frames); n != 0 {
		t.Fatalf("%d frames handled more than once, the first %+v", n, <-frames)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if cl := testkit.Receive(t, srv.closes, "the server to hear of the close"); !errors.Is(cl.err, ErrClosed) {
		t.Errorf("HandleClose(%v), want ErrClosed", cl.err)
	}
	testkit.Until(t, "the last reader to exit", func() bool { return !goroutineExists(reader) })
	if n := srv.closed.Load(); n != 1 {
		t.Errorf("HandleClose called %d times, want once", n)
	}
}

// Work can block on the goroutine the reading was handed to as well: it
// hands over in turn, also when the work it took over from ends first,
// and the last reader reads on alone.
func TestRunInlineHandsOverTwice(t *testing.T) {
	frames := make(chan handled, 256)
	blocked := make(chan uint64, 2)
	release := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		call := f.(*frame.Cancel).Call
		w, grace := work(func() {}), quickGrace
		switch call {
		case 0:
			grace = inlineGrace
		case 1:
			// Long enough for frame 0's work to end first: that must not
			// end the lend to frame 1's.
			grace = 100 * time.Millisecond
		}
		if call < 2 {
			w = func() {
				blocked <- goid()
				<-release[call]
			}
		}
		c.(conncap.InlineConn).RunInline(w, grace)
		frames <- handled{call: call, g: goid()}
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	send := func(from, to uint64) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := c.Send(&frame.Cancel{Call: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, 0)
	g0 := testkit.Receive(t, blocked, "frame 0's work to block")
	send(1, 1)
	g1 := testkit.Receive(t, blocked, "frame 1's work to block")
	if g1 == g0 {
		t.Fatal("frame 1 was read by the goroutine frame 0's work blocks")
	}
	close(release[0])
	if h := testkit.Receive(t, frames, "frame 0 to end"); h.call != 0 || h.g != g0 {
		t.Fatalf("handled %+v, want frame 0 on goroutine %d", h, g0)
	}
	testkit.Until(t, "the goroutine of frame 0's work to exit", func() bool { return !goroutineExists(g0) })
	send(2, 20)
	var reader uint64
	for i := uint64(2); i <= 20; i++ {
		h := testkit.Receive(t, frames, fmt.Sprintf("frame %d while frame 1's work blocks", i))
		if reader == 0 {
			reader = h.g
		}
		if h.call != i || h.g != reader || h.g == g0 || h.g == g1 {
			t.Fatalf("handled %+v, want frame %d on a third goroutine, %d", h, i, reader)
		}
	}
	close(release[1])
	testkit.Until(t, "the goroutine of frame 1's work to exit", func() bool { return !goroutineExists(g1) })
	if h := testkit.Receive(t, frames, "frame 1 to end"); h.call != 1 || h.g != g1 {
		t.Fatalf("handled %+v, want frame 1 on goroutine %d", h, g1)
	}
	send(21, 40)
	for i := uint64(21); i <= 40; i++ {
		if h := testkit.Receive(t, frames, fmt.Sprintf("frame %d", i)); h.call != i || h.g != reader {
			t.Fatalf("handled %+v, want frame %d on goroutine %d", h, i, reader)
		}
	}
	if n := len(frames); n != 0 {
		t.Fatalf("%d frames handled more than once, the first %+v", n, <-frames)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Receive(t, srv.closes, "the server to hear of the close")
	testkit.Until(t, "the last reader to exit", func() bool { return !goroutineExists(reader) })
	if n := srv.closed.Load(); n != 1 {
		t.Errorf("HandleClose called %d times, want once", n)
	}
}

// A connection that closes while inline work blocks is closed once: by the
// goroutine the reading was handed to, not again by the one the work
// blocks, when it ends.
func TestRunInlineCloseWhileWorkBlocks(t *testing.T) {
	blocked := make(chan uint64, 1)
	release := make(chan struct{})
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		c.(conncap.InlineConn).RunInline(work(func() {
			blocked <- goid()
			<-release
		}), inlineGrace)
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
	old := testkit.Receive(t, blocked, "the blocking work to start")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if cl := testkit.Receive(t, srv.closes, "the server to hear of the close while the work blocks"); !errors.Is(cl.err, ErrClosed) {
		t.Errorf("HandleClose(%v), want ErrClosed", cl.err)
	}
	close(release)
	testkit.Until(t, "the goroutine of the blocked work to exit", func() bool { return !goroutineExists(old) })
	if n := srv.closed.Load(); n != 1 {
		t.Errorf("HandleClose called %d times, want once", n)
	}
}

// writeFrames writes fs to nc in one write: on loopback they arrive
// together, and the reader reads them in one go.
func writeFrames(t *testing.T, nc net.Conn, fs ...frame.Frame) {
	t.Helper()
	var b []byte
	for _, f := range fs {
		var err error
		if b, err = frame.Append(b, f, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// rawReader reads the frames a node sends to a raw connection.
type rawReader struct {
	nc net.Conn
	fr *frameReader
}

func newRawReader(nc net.Conn) *rawReader {
	return &rawReader{nc: nc, fr: newFrameReader(nc, DefaultMaxFrameSize, nil)}
}

func (r *rawReader) next(t *testing.T) frame.Frame {
	t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(waitLimit))
	p, err := r.fr.next()
	if err != nil {
		t.Fatalf("reading what the node sent: %v", err)
	}
	f, err := frame.Decode(p)
	if err != nil {
		t.Fatal(err)
	}
	return cloneFrame(f)
}

// The reader lends itself only when nothing else has been read: with a
// frame waiting behind it, RunInline refuses at once and leaves the work
// to the caller, and the last frame of a batch runs its work inline.
func TestRunInlineRefusedWhileFramesWait(t *testing.T) {
	type lent struct {
		call      uint64
		inline    bool
		ranInline bool
	}
	got := make(chan lent, 16)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		ran := false
		ok := c.(conncap.InlineConn).RunInline(work(func() { ran = true }), quickGrace)
		got <- lent{f.(*frame.Cancel).Call, ok, ran}
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	raw := rawHello(t, l.Addr())

	check := func(want ...lent) {
		t.Helper()
		for _, w := range want {
			if g := testkit.Receive(t, got, fmt.Sprintf("frame %d", w.call)); g != w {
				t.Errorf("frame %d: RunInline %v, work ran inline %v; want frame %d: %v, %v", g.call, g.inline, g.ranInline, w.call, w.inline, w.ranInline)
			}
		}
	}
	writeFrames(t, raw, &frame.Cancel{Call: 1}, &frame.Cancel{Call: 2}, &frame.Cancel{Call: 3})
	check(lent{1, false, false}, lent{2, false, false}, lent{3, true, true})
	writeFrames(t, raw, &frame.Cancel{Call: 4})
	check(lent{4, true, true})
}

// Work too short to hand over runs on the reader with frames waiting
// behind it too: each frame's work runs, on the read goroutine, before the
// next frame is handled.
func TestRunAheadWhileFramesWait(t *testing.T) {
	type lent struct {
		call  uint64
		ranOn uint64 // the goroutine the work ran on, 0 if it did not run
		g     uint64 // the goroutine that handled the frame
	}
	got := make(chan lent, 16)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		var ranOn uint64
		c.(conncap.InlineConn).RunAhead(work(func() { ranOn = goid() }), quickGrace)
		got <- lent{f.(*frame.Cancel).Call, ranOn, goid()}
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	raw := rawHello(t, l.Addr())

	writeFrames(t, raw, &frame.Cancel{Call: 1}, &frame.Cancel{Call: 2}, &frame.Cancel{Call: 3})
	var reader uint64
	for want := uint64(1); want <= 3; want++ {
		g := testkit.Receive(t, got, fmt.Sprintf("frame %d", want))
		if reader == 0 {
			reader = g.g
		}
		if g.call != want || g.ranOn != reader || g.g != reader {
			t.Errorf("frame %d handled on goroutine %d, its work ran on %d; want frame %d, both on the reader %d", g.call, g.g, g.ranOn, want, reader)
		}
	}
}

// What inline work sends on a crowded connection is left to the reader,
// which writes it with the rest of the batch: no flusher is started for
// it. The replies arrive, in order, and the reader's handing over of a
// blocked work's reading does not strand what the work sends after.
func TestInlineWorkLeavesItsSendsToTheReader(t *testing.T) {
	flusher := make(chan bool, 16) // after each Send: a goroutine other than the reader was writing
	started, release := make(chan struct{}, 1), make(chan struct{})
	var conn atomic.Pointer[stream]
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		conn.Store(c.(*stream))
		call := f.(*frame.Cancel).Call
		reply := func() {
			if err := c.Send(&frame.Cancel{Call: 1000 + call}); err != nil {
				panic(err)
			}
			s := c.(*stream)
			s.mu.Lock()
			flusher <- s.writing
			s.mu.Unlock()
		}
		w, grace := work(reply), quickGrace
		if call == 4 {
			// Blocks past its grace, then replies from the old reader.
			w, grace = func() { started <- struct{}{}; <-release; reply() }, inlineGrace
		}
		c.(conncap.InlineConn).RunAhead(w, grace)
	})
	raw := rawHello(t, listen(t, newTCP(t, "server", nil), srv).Addr())
	rr := newRawReader(raw)
	writeFrames(t, raw, &frame.Cancel{Call: 1}, &frame.Cancel{Call: 2}, &frame.Cancel{Call: 3})
	for want := uint64(1001); want <= 1003; want++ {
		if got := rr.next(t).(*frame.Cancel).Call; got != want {
			t.Fatalf("reply %d, want %d", got, want)
		}
	}
	for i := range 3 {
		if testkit.Receive(t, flusher, "a send") {
			t.Errorf("send %d of a batch of three: a flusher was writing, want the reader to write", i+1)
		}
	}

	// A work that blocks is handed over; what it sends once released goes
	// out though nothing else arrives for the new reader.
	writeFrames(t, raw, &frame.Cancel{Call: 4})
	testkit.Receive(t, started, "the blocking work to start")
	testkit.Until(t, "the reading to be handed over", func() bool {
		s := conn.Load()
		s.lendMu.Lock()
		defer s.lendMu.Unlock()
		return !s.lending
	})
	close(release)
	if got := rr.next(t).(*frame.Cancel).Call; got != 1004 {
		t.Fatalf("reply %d, want 1004", got)
	}
	testkit.Receive(t, flusher, "the released send")
}

// A frame Queue adds in HandleFrame goes out without any other write once
// the reader has handled what it read: the replies to a batch leave in one
// write.
func TestQueueFlushedAfterTheBatch(t *testing.T) {
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		if err := c.(conncap.InlineConn).Queue(&frame.Cancel{Call: 1000 + f.(*frame.Cancel).Call}); err != nil {
			panic(err)
		}
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", nil), l.Addr(), cli)
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
	if got := cli.next(t).f.(*frame.Cancel).Call; got != 1001 {
		t.Fatalf("reply %d, want 1001", got)
	}

	// A batch of frames read at once: the replies wait for its end.
	conns := make(chan Conn, 8)
	srv2 := newFuncHandler(func(c Conn, f frame.Frame) {
		if err := c.(conncap.InlineConn).Queue(&frame.Cancel{Call: 1000 + f.(*frame.Cancel).Call}); err != nil {
			panic(err)
		}
		conns <- c
	})
	raw := rawHello(t, listen(t, newTCP(t, "server2", nil), srv2).Addr())
	rr := newRawReader(raw)
	writeFrames(t, raw, &frame.Cancel{Call: 1}, &frame.Cancel{Call: 2}, &frame.Cancel{Call: 3})
	for want := uint64(1001); want <= 1003; want++ {
		if got := rr.next(t).(*frame.Cancel).Call; got != want {
			t.Fatalf("reply %d, want %d", got, want)
		}
	}
	// A write is counted before its bytes: once all the replies' bytes
	// are counted, so is every write that carried them.
	var replies []byte
	for call := uint64(1001); call <= 1003; call++ {
		replies, _ = frame.Append(replies, &frame.Cancel{Call: call}, 0)
	}
	st := testkit.Receive(t, conns, "the server's conn").(conncap.StatsConn)
	testkit.Until(t, "the server to count the bytes it sent", func() bool { return st.Stats().BytesSent == uint64(len(replies)) })
	if got := st.Stats(); got.FramesSent != 3 || got.Writes != 1 {
		t.Errorf("server sent %d frames in %d writes, want 3 in 1", got.FramesSent, got.Writes)
	}
}

// A frame queued before work that blocks goes out when the reading is
// handed over, while the work still blocks.
func TestQueueFlushedByTheHandover(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		ic := c.(conncap.InlineConn)
		if err := ic.Queue(&frame.Cancel{Call: 1000 + f.(*frame.Cancel).Call}); err != nil {
			panic(err)
		}
		ic.RunInline(work(func() { <-release }), inlineGrace)
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", nil), l.Addr(), cli)
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
	if got := cli.next(t).f.(*frame.Cancel).Call; got != 1001 {
		t.Fatalf("reply %d, want 1001", got)
	}
}

// Close writes what Queue left waiting before it closes; after it, Queue
// fails with ErrClosed.
func TestQueueAndClose(t *testing.T) {
	afterClose := make(chan error, 1)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		ic := c.(conncap.InlineConn)
		if err := ic.Queue(&frame.Cancel{Call: 1000 + f.(*frame.Cancel).Call}); err != nil {
			panic(err)
		}
		c.Close()
		afterClose <- ic.Queue(&frame.Cancel{Call: 2000})
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	cli := newRecorder()
	c := dial(t, newTCP(t, "client", nil), l.Addr(), cli)
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
	if got := cli.next(t).f.(*frame.Cancel).Call; got != 1001 {
		t.Fatalf("reply %d, want 1001", got)
	}
	if err := testkit.Receive(t, afterClose, "Queue after Close"); !errors.Is(err, ErrClosed) {
		t.Errorf("Queue after Close: %v, want ErrClosed", err)
	}
	if cl := cli.nextClose(t); !errors.Is(cl.err, ErrClosed) {
		t.Errorf("client's HandleClose(%v), want ErrClosed", cl.err)
	}
	if n := len(cli.frames); n != 0 {
		t.Errorf("%d frames after the reply, the first %+v", n, (<-cli.frames).f)
	}
}

// A frame queued while the next frame has only begun to arrive goes out at
// once: the reader waits for the rest of that frame, and the queued one
// must not wait with it.
func TestQueueNotHeldBackByAPartialFrame(t *testing.T) {
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		if err := c.(conncap.InlineConn).Queue(&frame.Cancel{Call: 1000 + f.(*frame.Cancel).Call}); err != nil {
			panic(err)
		}
	})
	raw := rawHello(t, listen(t, newTCP(t, "server", nil), srv).Addr())
	rr := newRawReader(raw)
	b, _ := frame.Append(nil, &frame.Cancel{Call: 1}, 0)
	second, _ := frame.Append(nil, &frame.Cancel{Call: 2}, 0)
	b = append(b, second[:len(second)-1]...) // all of the second frame but its last byte
	if _, err := raw.Write(b); err != nil {
		t.Fatal(err)
	}
	if got := rr.next(t).(*frame.Cancel).Call; got != 1001 {
		t.Fatalf("reply %d, want 1001", got)
	}
	if _, err := raw.Write(second[len(second)-1:]); err != nil {
		t.Fatal(err)
	}
	if got := rr.next(t).(*frame.Cancel).Call; got != 1002 {
		t.Fatalf("reply %d, want 1002", got)
	}
}

// overrunWork is work that blocks until released and counts the times it
// is told it overran, and whether it still ran then.
type overrunWork struct {
	release chan struct{}
	started chan struct{}
	running atomic.Bool
	told    atomic.Int32
	toldRun atomic.Bool // it was running when told
}

func (w *overrunWork) Run() {
	w.running.Store(true)
	close(w.started)
	<-w.release
	w.running.Store(false)
}

func (w *overrunWork) Overran() {
	w.told.Add(1)
	w.toldRun.Store(w.running.Load())
}

// Work that overruns its grace hears of it once, while it still runs, and
// quick work never does.
func TestRunInlineTellsOverrunnerOnce(t *testing.T) {
	slow := &overrunWork{release: make(chan struct{}), started: make(chan struct{})}
	quick := &overrunWork{release: make(chan struct{}), started: make(chan struct{})}
	close(quick.release)
	done := make(chan bool, 2)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		w := quick
		if f.(*frame.Cancel).Call == 1 {
			w = slow
		}
		done <- c.(conncap.InlineConn).RunInline(w, inlineGrace)
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	if err := c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.Receive(t, slow.started, "the slow work to start")
	testkit.Until(t, "the slow work to hear it overran", func() bool { return slow.told.Load() > 0 })
	if err := c.Send(&frame.Cancel{Call: 2}); err != nil {
		t.Fatal(err)
	}
	if !testkit.Receive(t, done, "the quick work to end") {
		t.Fatal("the quick work did not run inline")
	}
	close(slow.release)
	if !testkit.Receive(t, done, "the slow work to end") {
		t.Fatal("the slow work did not run inline")
	}
	if n := slow.told.Load(); n != 1 || !slow.toldRun.Load() {
		t.Errorf("slow work told %d times (running then: %v), want once while it ran", n, slow.toldRun.Load())
	}
	if n := quick.told.Load(); n != 0 {
		t.Errorf("quick work told it overran %d times", n)
	}
}

// Frames queued while a long batch of frames is handled (a saturated
// node's acks) go out on the way, not only at the end of the batch: the
// handler of the batch's last frame sees the peer receive the first one's
// reply before it returns.
func TestQueueFlushedDuringALongBatch(t *testing.T) {
	const n = 32
	seen := make(chan struct{})
	before := make(chan bool, 1)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		call := f.(*frame.Cancel).Call
		if err := c.(conncap.InlineConn).Queue(&frame.Cancel{Call: 1000 + call}); err != nil {
			panic(err)
		}
		time.Sleep(time.Millisecond) // each frame's work
		if call == n {
			select {
			case <-seen:
				before <- true
			case <-time.After(waitLimit):
				before <- false
			}
		}
	})
	raw := rawHello(t, listen(t, newTCP(t, "server", nil), srv).Addr())
	rr := newRawReader(raw)
	var b []byte
	for call := uint64(1); call <= n; call++ {
		b, _ = frame.Append(b, &frame.Cancel{Call: call}, 0)
	}
	if _, err := raw.Write(b); err != nil {
		t.Fatal(err)
	}
	if got := rr.next(t).(*frame.Cancel).Call; got != 1001 {
		t.Fatalf("reply %d, want 1001", got)
	}
	close(seen)
	if !testkit.Receive(t, before, "the last frame's handler") {
		t.Error("the first reply left only after the whole batch was handled")
	}
}

// Quick work run inline frame after frame keeps the overrun timer armed,
// each check twice as late as the one before, up to maxCheckBackoff times
// the grace; a check that finds no work run since lets it rest, and the
// next work arms it at its grace again. The checks are made here by
// calling the timer's function: the grace is long, so the timer itself
// stays out of the way.
func TestRunInlineChecksLessWhileQuick(t *testing.T) {
	conns := make(chan *stream, 1)
	ran := make(chan struct{}, 1)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		s := c.(*stream)
		select {
		case conns <- s:
		default:
		}
		s.RunInline(work(func() {}), quickGrace)
		ran <- struct{}{}
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	var s *stream
	run := func(call uint64) {
		t.Helper()
		if err := c.Send(&frame.Cancel{Call: call}); err != nil {
			t.Fatal(err)
		}
		testkit.Receive(t, ran, "the work to run")
		if s == nil {
			s = <-conns
		}
	}
	interval := func() (time.Duration, bool) {
		s.lendMu.Lock()
		defer s.lendMu.Unlock()
		return s.lendEvery.cur, !s.lendDue.IsZero()
	}
	run(1)
	if d, armed := interval(); d != quickGrace || !armed {
		t.Fatalf("after the first work: timer armed %v, every %v; want armed, every %v", armed, d, quickGrace)
	}
	want := quickGrace
	for i := range 8 {
		s.overran()
		want = min(2*want, maxCheckBackoff*quickGrace)
		if d, armed := interval(); d != want || !armed {
			t.Fatalf("check %d after work ran: timer armed %v, every %v; want armed, every %v", i+1, armed, d, want)
		}
		run(uint64(i + 2))
	}
	s.overran()
	s.overran() // no work ran since the last check
	if _, armed := interval(); armed {
		t.Fatal("the timer stays armed although no work ran since its last check")
	}
	run(100)
	if d, armed := interval(); d != quickGrace || !armed {
		t.Fatalf("after work on a resting timer: timer armed %v, every %v; want armed, every %v", armed, d, quickGrace)
	}
}

// Work that blocks after a long run of quick work, once the overrun
// timer checks at its longest interval, is still handed over: the frame
// behind it is handled while it blocks.
func TestRunInlineHandsOverAfterQuickWork(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	blocked := make(chan bool, 1) // whether the blocking work ran inline
	conns := make(chan *stream, 1)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		s := c.(*stream)
		select {
		case conns <- s:
		default:
		}
		if f.(*frame.Cancel).Call == 0 {
			w := work(func() { close(started); <-release })
			if !s.RunInline(w, inlineGrace) {
				go w.Run()
				blocked <- false
				return
			}
			blocked <- true
			return
		}
		if !s.RunInline(work(func() {}), inlineGrace) {
			t.Errorf("quick work refused inline")
		}
		c.Send(f) // fails only once the test has ended
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	rec := newRecorder()
	c := dial(t, newTCP(t, "client", nil), l.Addr(), rec)
	call := uint64(1)
	echo := func() {
		t.Helper()
		if err := c.Send(&frame.Cancel{Call: call}); err != nil {
			t.Fatal(err)
		}
		if got := rec.next(t).f.(*frame.Cancel).Call; got != call {
			t.Fatalf("echo of call %d, want %d", got, call)
		}
		call++
	}
	echo()
	s := <-conns
	// Quick work, frame after frame, until the timer checks at its
	// longest interval (a pause on a busy machine may let it rest and
	// start over).
	testkit.Until(t, "the overrun timer backs off to its longest interval", func() bool {
		for range 100 {
			echo()
			s.lendMu.Lock()
			longest := s.lendEvery.cur == maxCheckBackoff*inlineGrace
			s.lendMu.Unlock()
			if longest {
				return true
			}
		}
		return false
	})
	if err := c.Send(&frame.Cancel{Call: 0}); err != nil {
		t.Fatal(err)
	}
	testkit.Receive(t, started, "the blocking work to start")
	echo()
	close(release)
	if !testkit.Receive(t, blocked, "the blocking work to end") {
		t.Fatal("the blocking work did not run inline")
	}
}
