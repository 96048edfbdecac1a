package runtime_test

// Over TCP a caller waiting alone for its answer reads the connection
// itself (conncap.CallerReadConn); the in-memory network has no such
// path, so these tests cover it: the timers, the context and Close still
// end an attempt while its caller reads. A caller reads only when the
// reading is free as it starts to wait, which a loaded machine can make it
// miss; the tests then try again.

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// callerReads counts the frames the client's callers read themselves.
func callerReads(c *runtime.Client) uint64 {
	var n uint64
	for _, conn := range c.Conns() {
		if sc, ok := conn.(conncap.StatsConn); ok {
			n += sc.Stats().CallerReads
		}
	}
	return n
}

// Sequential calls are read by their callers, and concurrent ones all
// answered, whoever reads.
func TestTCPCallersReadTheirAnswers(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	for i := range 50 {
		if got, err := e.ledger.Add(context.Background(), "acct", 1); err != nil || got != int64(i+1) {
			t.Fatalf("Add = %d, %v", got, err)
		}
	}
	if callerReads(e.client) == 0 {
		t.Error("no frame of 50 sequential calls was read by its caller")
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 16 {
		wg.Go(func() {
			for range 50 {
				if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
					failed.Add(1)
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, err := e.ledger.Add(context.Background(), "acct", 0); err != nil || got != 50+16*50 {
		t.Errorf("balance %d, %v; want %d", got, err, 50+16*50)
	}
}

// Over TCP, where the caller reads its own answer, a call stays within the
// allocation budget, with a context that can end as without: a quick
// answer comes before the context is watched.
func TestTCPCallAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: counts are not the program's (make test runs this test without it)")
	}
	e := newTCPEnv(t, patientSettings())
	for _, l := range e.ledgers {
		l.Lean = true
	}
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, ctx := range map[string]context.Context{"background": context.Background(), "cancelable": cancelable} {
		if _, err := e.ledger.Add(ctx, "acct", 1); err != nil {
			t.Fatal(err)
		}
		reads := callerReads(e.client)
		n := testing.AllocsPerRun(200, func() {
			if _, err := e.ledger.Add(ctx, "acct", 1); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: %.1f allocations per call, client and server; %d frames read by callers", name, n, callerReads(e.client)-reads)
		if n > maxCallAllocs {
			t.Errorf("%s: %.1f allocations per call, client and server; want at most %d", name, n, maxCallAllocs)
		}
	}
}

// blockedCall starts a call of Add on the entity's owner, whose handler
// blocks until release is closed, right after a quick call, so that it
// finds the reading free; it returns once the caller reads the blocked
// call's frames (its ack and heartbeats), trying again with a new call if
// it does not.
func blockedCall(t *testing.T, e *tcpEnv, ctx context.Context) (done chan error, release func()) {
	t.Helper()
	own := e.owners(t, "acct")
	for try := 0; try < 20; try++ {
		rel := make(chan struct{})
		e.ledgers[own[0]].SetHook(nil)
		if _, err := e.ledger.Add(context.Background(), "acct", 0); err != nil {
			t.Fatal(err)
		}
		e.ledgers[own[0]].SetHook(func(hctx context.Context, _ string, _ int64) error {
			select {
			case <-rel:
				return nil
			case <-hctx.Done():
				return hctx.Err()
			}
		})
		before := callerReads(e.client)
		done = make(chan error, 1)
		go func() { _, err := e.ledger.Add(ctx, "acct", 1); done <- err }()
		// Nothing signals a frame its caller read: the count says so.
		if testkit.Within(e.s.HeartbeatTimeout/2, func() bool { return callerReads(e.client) >= before+2 }) {
			t.Cleanup(func() { closeOnce(rel) })
			return done, func() { closeOnce(rel) }
		}
		close(rel)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("in 20 tries no blocked call was read by its caller")
	return nil, nil
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// A caller that reads stops when its context ends.
func TestTCPCallerReadingEndsWithContext(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	ctx, cancel := context.WithCancel(context.Background())
	done, _ := blockedCall(t, e, ctx)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Add = %v, want context.Canceled", err)
		}
		// Without its context watched, the caller would read on until its
		// timer's due time, the heartbeat timeout after the send.
		if took := time.Since(start); took >= e.s.HeartbeatTimeout/2 {
			t.Errorf("Add returned %v after its context ended, near the heartbeat timeout %v", took, e.s.HeartbeatTimeout)
		}
	case <-time.After(e.s.AttemptTimeout):
		t.Fatal("Add did not return after its context ended")
	}
}

// A caller that reads stops when the client closes.
func TestTCPCallerReadingEndsWithClose(t *testing.T) {
	e := newTCPEnv(t, patientSettings())
	done, _ := blockedCall(t, e, context.Background())
	start := time.Now()
	e.client.Close()
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrClientClosed) {
			t.Fatalf("Add = %v, want ErrClientClosed", err)
		}
		if took := time.Since(start); took >= e.s.HeartbeatTimeout/2 {
			t.Errorf("Add returned %v after Close, near the heartbeat timeout %v", took, e.s.HeartbeatTimeout)
		}
	case <-time.After(e.s.AttemptTimeout):
		t.Fatal("Add did not return after Close")
	}
}

// A node that stops answering while the caller reads, heartbeats and all
// (a process paused mid-call), is failed over on the heartbeat timeout,
// well before the attempt timeout.
func TestTCPCallerReadingFailsOverWhenNodePauses(t *testing.T) {
	s := patientSettings()
	s.HeartbeatInterval, s.HeartbeatTimeout = 20*time.Millisecond, time.Second
	e := newTCPEnv(t, s)
	own := e.owners(t, "acct")
	p := newPausingProxy(t, e.memberAddr(own[0]))
	e.setAddr(own[0], p.addr())

	done, _ := blockedCall(t, e, context.Background())
	start := time.Now()
	p.pause()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Add = %v, want the answer of %s", err, own[1])
		}
		if took := time.Since(start); took >= s.AttemptTimeout {
			t.Errorf("failover took %v, the attempt timeout: heartbeats were not watched", took)
		}
	case <-time.After(s.AttemptTimeout):
		t.Fatal("no failover within the attempt timeout")
	}
	if !e.client.Suspected(own[0]) {
		t.Errorf("the paused node is not suspected")
	}
	if n := e.ledgers[own[1]].Executions(); n != 1 {
		t.Errorf("%s ran %d times, want 1", own[1], n)
	}
}

// pausingProxy forwards connections to a node until paused; then nothing
// more reaches the client, as from a stopped process.
type pausingProxy struct {
	ln     net.Listener
	paused atomic.Bool
}

func newPausingProxy(t *testing.T, target string) *pausingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausingProxy{ln: ln}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Go(func() {
				go func() { io.Copy(u, c); u.Close() }()
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 && !p.paused.Load() {
						c.Write(buf[:n])
					}
					if err != nil {
						c.Close()
						return
					}
				}
			})
			t.Cleanup(func() { c.Close(); u.Close() })
		}
	}()
	return p
}

func (p *pausingProxy) addr() string { return p.ln.Addr().String() }
func (p *pausingProxy) pause()       { p.paused.Store(true) }
