package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// answers is a client's ConnHandler as the runtime's: a Result hands its call's
// waiter the answer, settling it with the connection first.
type answers struct {
	mu      sync.Mutex
	waiters map[uint64]*waiter
	closes  chan error
}

type waiter struct {
	done     chan struct{}
	ready    atomic.Bool
	byCaller atomic.Bool // the answer was handled on a caller's turn
	payload  []byte
	// When the connection said the answer came (ReceivedAt), and when
	// HandleFrame ran; written before ready.
	receivedAt, handledAt time.Time
}

func (w *waiter) Ready() bool { return w.ready.Load() }

func newAnswers() *answers {
	return &answers{waiters: map[uint64]*waiter{}, closes: make(chan error, 4)}
}

// expect registers a waiter for call's answer on c.
func (a *answers) expect(c Conn, call uint64) *waiter {
	w := &waiter{done: make(chan struct{})}
	a.mu.Lock()
	a.waiters[call] = w
	a.mu.Unlock()
	c.(conncap.CallerReadConn).Expect(1)
	return w
}

func (a *answers) HandleFrame(c Conn, f frame.Frame) {
	r, ok := f.(*frame.Result)
	if !ok {
		return
	}
	a.mu.Lock()
	w := a.waiters[r.Call]
	delete(a.waiters, r.Call)
	a.mu.Unlock()
	if w == nil {
		return
	}
	s := c.(*stream)
	cr := s.cr.Load()
	w.byCaller.Store(cr != nil && s.turn.Load() == &cr.turn)
	w.payload = bytes.Clone(r.Payload)
	w.receivedAt, w.handledAt = c.(conncap.ReceivedAtConn).ReceivedAt(), time.Now()
	c.(conncap.CallerReadConn).Expect(-1)
	w.ready.Store(true)
	close(w.done)
}

func (a *answers) HandleClose(c Conn, err error) { a.closes <- err }

// resultEcho is a server's ConnHandler that sends every Result back and
// ignores other frames: a Cancel is a request it never answers.
type resultEcho struct{ conns chan Conn }

func (e *resultEcho) HandleFrame(c Conn, f frame.Frame) {
	if _, ok := f.(*frame.Result); ok {
		if err := c.Send(f); err != nil {
			panic(err)
		}
	}
	select {
	case e.conns <- c:
	default:
	}
}

func (e *resultEcho) HandleClose(Conn, error) {}

// callerEnv is a client connection that callers read, to a resultEcho.
type callerEnv struct {
	c   Conn
	s   *stream
	cr  *callerReads
	a   *answers
	srv *resultEcho
}

// newCallerEnv dials; the reading stays free for lazy before a read
// goroutine takes it. edit, if given, configures the server's transport
// and then the client's.
func newCallerEnv(t *testing.T, lazy time.Duration, edit ...func(*TCPConfig)) *callerEnv {
	t.Helper()
	var srvEdit, cliEdit func(*TCPConfig)
	if len(edit) == 2 {
		srvEdit, cliEdit = edit[0], edit[1]
	}
	srv := &resultEcho{conns: make(chan Conn, 1)}
	l := listen(t, newTCP(t, "server", srvEdit), srv)
	a := newAnswers()
	c := dial(t, newTCP(t, "client", cliEdit), l.Addr(), a)
	s := c.(*stream)
	cr := s.callerReads()
	cr.after = lazy // before the first frame: no reader looks yet
	return &callerEnv{c: c, s: s, cr: cr, a: a, srv: srv}
}

func waitDone(t *testing.T, w *waiter) {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(waitLimit):
		t.Fatalf("no answer within %v", waitLimit)
	}
}

// call sends call's request and waits for its answer, reading it itself
// if it can; it reports whether it read.
func (e *callerEnv) call(t *testing.T, call uint64, payload []byte) (*waiter, bool) {
	t.Helper()
	w := e.a.expect(e.c, call)
	if err := e.c.Send(&frame.Result{Call: call, Status: frame.StatusOK, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	read := e.c.(conncap.CallerReadConn).ReadFor(context.Background(), w, time.Now().Add(waitLimit))
	waitDone(t, w)
	if !bytes.Equal(w.payload, payload) {
		t.Fatalf("call %d answered %d bytes, want %d", call, len(w.payload), len(payload))
	}
	return w, read
}

// peerCloses closes the server's end and waits for the client to notice,
// with no caller reading.
func (e *callerEnv) peerCloses(t *testing.T) {
	t.Helper()
	(<-e.srv.conns).Close()
	select {
	case err := <-e.a.closes:
		if err == nil {
			t.Errorf("HandleClose(nil) after the peer closed, want an error")
		}
	case <-time.After(waitLimit):
		t.Fatalf("the peer's close was not noticed within %v", waitLimit)
	}
}

// warm makes a first call, which the connection's first read goroutine
// answers, and waits until that goroutine left the reading free.
func (e *callerEnv) warm(t *testing.T) {
	t.Helper()
	e.call(t, 1000, []byte("warm"))
	testkit.Until(t, "the read goroutine leaves the reading free", e.cr.free.Load)
}

// A caller that finds the reading free reads its own answer, and leaves
// the reading free for the next one.
func TestCallerReadsItsOwnAnswer(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	for i := range uint64(5) {
		w, read := e.call(t, i, []byte{byte(i)})
		if !read || !w.byCaller.Load() {
			t.Fatalf("call %d: ReadFor %v, answer handled by the caller %v; want both", i, read, w.byCaller.Load())
		}
		if !e.cr.free.Load() {
			t.Fatalf("call %d: the reading is not free after it", i)
		}
	}
	if n := e.s.Stats().CallerReads; n != 5 {
		t.Errorf("Stats().CallerReads = %d, want 5", n)
	}
}

// ReceivedAt tells the handler when the read that brought its frame
// returned, whether a caller or a read goroutine read it: after the frame
// was sent, and no later than the handler runs. The runtime takes it for
// the attempt's arrival and the answer's, instead of reading the clock.
func TestReceivedAtIsWhenTheFrameWasRead(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	check := func(what string, w *waiter, sent time.Time) {
		t.Helper()
		if w.receivedAt.IsZero() || w.receivedAt.Before(sent) || w.receivedAt.After(w.handledAt) {
			t.Errorf("%s: ReceivedAt %v, want from the send (%v) to HandleFrame (%v)", what, w.receivedAt, sent, w.handledAt)
		}
	}
	sent := time.Now()
	w, _ := e.call(t, 1000, []byte("warm"))
	check("answer read by the read goroutine", w, sent)
	testkit.Until(t, "the read goroutine leaves the reading free", e.cr.free.Load)
	for i := range uint64(3) {
		sent := time.Now()
		w, read := e.call(t, i, []byte{byte(i)})
		if !read {
			t.Fatalf("call %d: the caller did not read its answer", i)
		}
		check("answer read by its caller", w, sent)
	}
}

// A caller whose deadline comes within callerSlack of the one the caller
// before it set keeps that one (setDeadline), which fires first: the
// caller still reads until its own, and then stops. The slack is
// lengthened here so that the two deadlines are further apart than a
// timer's wake-up can be late.
func TestCallerReadKeptDeadlineIsNotItsOwn(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	rc := e.c.(conncap.CallerReadConn)
	e.s.fr.slack = time.Second // the reading is free: no goroutine reads fr

	first := time.Now().Add(300 * time.Millisecond)
	w := e.a.expect(e.c, 1)
	if err := e.c.Send(&frame.Result{Call: 1, Status: frame.StatusOK}); err != nil {
		t.Fatal(err)
	}
	if !rc.ReadFor(context.Background(), w, first) || !w.Ready() {
		t.Fatal("the first caller did not read its answer")
	}

	own := first.Add(300 * time.Millisecond)
	w = e.a.expect(e.c, 2)
	if err := e.c.Send(&frame.Cancel{Call: 2}); err != nil { // never answered
		t.Fatal(err)
	}
	if !rc.ReadFor(context.Background(), w, own) {
		t.Fatal("ReadFor did not read")
	}
	if now := time.Now(); now.Before(own) {
		t.Fatalf("ReadFor stopped %v before its deadline, at the earlier caller's", own.Sub(now))
	} else if late := now.Sub(own); late > waitLimit {
		t.Fatalf("ReadFor stopped %v after its deadline", late)
	}
	if w.Ready() {
		t.Fatal("ready without an answer")
	}
	rc.Expect(-1)
	// The connection carries on, read by its callers.
	if w, read := e.call(t, 3, []byte("after")); !read || !w.byCaller.Load() {
		t.Fatalf("after the deadline: ReadFor %v, by the caller %v", read, w.byCaller.Load())
	}
}

// A free reading does not stay free: a read goroutine takes it, so that a
// peer's close is noticed without any caller.
func TestCallerReadLazyReaderNoticesPeerClose(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	e.cr.mu.Lock()
	e.cr.after = lazyReadAfter
	e.cr.mu.Unlock()
	if _, read := e.call(t, 1, []byte("x")); !read {
		t.Fatal("the caller did not read")
	}
	e.peerCloses(t)
}

// The lazy timer counts from the last time the turn was left free, not
// from the first: callers that keep taking the turn keep the read
// goroutine away, and the timer is armed once rather than moved on every
// call. While they keep taking it, each check comes twice as late as the
// one before, up to maxCheckBackoff times after: a connection used call
// after call costs a few firings a second, not one every after.
func TestCallerReadLazyCountsFromLastFree(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	e.call(t, 1, []byte("a"))
	e.cr.mu.Lock()
	due := e.cr.lazyDue
	e.cr.mu.Unlock()
	if due.IsZero() {
		t.Fatal("the turn was left free without the lazy timer armed")
	}
	e.call(t, 2, []byte("b"))
	e.cr.mu.Lock()
	if !e.cr.lazyDue.Equal(due) {
		t.Errorf("the second call moved the lazy timer from %v to %v", due, e.cr.lazyDue)
	}
	// The timer fires (called here directly) while the turn was freed
	// less than after ago: the turn stays free, and the timer looks again
	// twice as late, then twice as late again, up to its cap, as long as
	// the turn is freed in between or stays free.
	want := e.cr.after
	for i := 0; i < 8; i++ {
		e.cr.freedAt = time.Now()
		e.cr.mu.Unlock()
		before := time.Now()
		e.s.lazyRead(e.cr)
		e.cr.mu.Lock()
		if !e.cr.free.Load() {
			t.Fatal("the lazy timer took a turn freed less than after ago")
		}
		want = min(2*want, maxCheckBackoff*e.cr.after)
		if e.cr.lazyEvery.cur != want || e.cr.lazyDue.Before(before.Add(want)) {
			t.Fatalf("check %d: next check after %v, due %v from now; want %v", i+1, e.cr.lazyEvery.cur, e.cr.lazyDue.Sub(before), want)
		}
	}
	// Freed longer than after ago: it takes the turn, and its read
	// goroutine notices the peer's close.
	e.cr.freedAt = time.Now().Add(-2 * time.Hour)
	e.cr.mu.Unlock()
	go e.s.lazyRead(e.cr)
	testkit.Until(t, "the lazy timer takes a turn freed long enough ago", func() bool { return !e.cr.free.Load() })
	e.cr.mu.Lock()
	if !e.cr.lazyDue.IsZero() {
		t.Errorf("the lazy timer took the turn and is still due at %v", e.cr.lazyDue)
	}
	e.cr.mu.Unlock()
	e.peerCloses(t)
}

// A caller stops reading at its deadline, and when its context ends; the
// connection carries on either way.
func TestCallerReadStopsAtDeadlineAndContext(t *testing.T) {
	stopAndGoOn(t, newCallerEnv(t, time.Hour))
}

// Over TLS too: a record read after a deadline passed carries on.
func TestCallerReadStopsAtDeadlineAndContextTLS(t *testing.T) {
	ca := testkit.NewCA(t, "ca")
	stopAndGoOn(t, newCallerEnv(t, time.Hour,
		func(c *TCPConfig) { c.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server")}} },
		func(c *TCPConfig) { c.ClientTLS = &tls.Config{RootCAs: ca.Pool} }))
}

func stopAndGoOn(t *testing.T, e *callerEnv) {
	e.warm(t)
	rc := e.c.(conncap.CallerReadConn)

	w := e.a.expect(e.c, 1)
	if err := e.c.Send(&frame.Cancel{Call: 1}); err != nil { // never answered
		t.Fatal(err)
	}
	if !rc.ReadFor(context.Background(), w, time.Now().Add(20*time.Millisecond)) {
		t.Fatal("ReadFor did not read")
	}
	if w.Ready() {
		t.Fatal("ready without an answer")
	}
	rc.Expect(-1) // the caller gives up
	if !e.cr.free.Load() {
		t.Fatal("the reading is not free after a deadline")
	}

	ctx, cancel := context.WithCancel(context.Background())
	w = e.a.expect(e.c, 2)
	if err := e.c.Send(&frame.Cancel{Call: 2}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	go func() {
		// Past unwatchedRead, so that the context is watched, not polled.
		testkit.Within(testkit.Bound, func() bool {
			e.cr.mu.Lock()
			reading := e.cr.reading
			e.cr.mu.Unlock()
			return reading && time.Since(start) > 10*unwatchedRead
		})
		cancel()
	}()
	if !rc.ReadFor(ctx, w, start.Add(3*waitLimit)) {
		t.Fatal("ReadFor did not read")
	}
	if d := time.Since(start); d > waitLimit {
		t.Fatalf("ReadFor returned %v after its context ended", d)
	}
	if w.Ready() {
		t.Fatal("ready without an answer")
	}
	rc.Expect(-1)

	// The interruption's deadline in the past does not end the connection.
	for i := range uint64(3) {
		if w, read := e.call(t, 10+i, []byte("after")); !read || !w.byCaller.Load() {
			t.Fatalf("after the interruption: ReadFor %v, by the caller %v", read, w.byCaller.Load())
		}
	}
	select {
	case err := <-e.a.closes:
		t.Fatalf("the connection closed: %v", err)
	default:
	}
}

// A caller that leaves while others await answers hands the reading to a
// read goroutine at once, which answers them.
func TestCallerReadHandsOverToReader(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	wb := e.a.expect(e.c, 2) // waits on its own, without reading
	if _, read := e.call(t, 1, []byte("a")); !read {
		t.Fatal("the first caller did not read")
	}
	if e.cr.free.Load() {
		t.Fatal("the reading was left free while an answer is awaited")
	}
	// The read goroutine keeps the reading for cr.after after answers
	// awaited side by side: as if that were long ago, it rests at the
	// next answer.
	e.s.crowdAt.Store(0)
	if err := e.c.Send(&frame.Result{Call: 2, Status: frame.StatusOK, Payload: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, wb)
	if wb.byCaller.Load() {
		t.Error("the answer of a caller that did not read was handled on a caller's turn")
	}
	testkit.Until(t, "the read goroutine leaves the reading free once nothing is awaited", e.cr.free.Load)
}

// Many callers at once, each reading when it can: every answer arrives.
func TestCallerReadConcurrentCallers(t *testing.T) {
	e := newCallerEnv(t, lazyReadAfter)
	const callers, calls = 16, 50
	var wg sync.WaitGroup
	for g := range uint64(callers) {
		wg.Go(func() {
			for i := range uint64(calls) {
				e.call(t, g*calls+i, []byte{byte(g), byte(i)})
			}
		})
	}
	wg.Wait()
	if n := e.cr.expect.Load(); n != 0 {
		t.Errorf("%d answers still awaited", n)
	}
}

// A frame larger than the read buffer is read by a read goroutine, and
// answers its caller.
func TestCallerReadLeavesLargeFrameToReader(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	big := bytes.Repeat([]byte{7}, 3*baseReadBuffer)
	w, read := e.call(t, 1, big)
	if !read || w.byCaller.Load() {
		t.Errorf("ReadFor %v, handled by the caller %v; want true, false", read, w.byCaller.Load())
	}
	if w, read := e.call(t, 2, []byte("small")); !read && !w.byCaller.Load() {
		// The read goroutine may still hold the reading; then it answers.
		t.Logf("the next call was answered by the read goroutine")
	}
}

// Closing the connection while a caller reads ends the reading, and the
// handler hears of the close from that caller.
func TestCallerReadCloseWhileReading(t *testing.T) {
	e := newCallerEnv(t, time.Hour)
	e.warm(t)
	w := e.a.expect(e.c, 1)
	if err := e.c.Send(&frame.Cancel{Call: 1}); err != nil {
		t.Fatal(err)
	}
	returned := make(chan bool, 1)
	go func() {
		returned <- e.c.(conncap.CallerReadConn).ReadFor(context.Background(), w, time.Now().Add(time.Hour))
	}()
	testkit.Until(t, "the caller reads", func() bool {
		e.cr.mu.Lock()
		defer e.cr.mu.Unlock()
		return e.cr.reading
	})
	e.c.Close()
	select {
	case read := <-returned:
		if !read {
			t.Error("ReadFor returned false")
		}
	case <-time.After(waitLimit):
		t.Fatalf("ReadFor still reading %v after Close", waitLimit)
	}
	select {
	case err := <-e.a.closes:
		if err != nil {
			t.Errorf("HandleClose(%v) after a local Close, want nil", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("no HandleClose after Close")
	}
}
