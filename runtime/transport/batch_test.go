package transport

import (
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// While the connection is crowded, frames sent back to back leave in one
// write; once the crowd is older than batchAfterCrowd, each send writes
// at once again.
func TestCrowdedConnectionBatchesSends(t *testing.T) {
	// One P: the flusher a send starts runs only once the sender stops,
	// as it would behind the other goroutines ready to run on a busy one.
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	rec := newRecorder()
	l := listen(t, newTCP(t, "server", nil), rec)
	c := dial(t, newTCP(t, "client", nil), l.Addr(), newRecorder())
	s := c.(*stream)

	const n = 20
	sendAll := func(first uint64) (writes uint64) {
		t.Helper()
		before := s.Stats().Writes
		for i := first; i < first+n; i++ {
			if err := s.Send(&frame.Cancel{Call: i}); err != nil {
				t.Fatal(err)
			}
		}
		for i := first; i < first+n; i++ {
			if got := rec.next(t).f.(*frame.Cancel).Call; got != i {
				t.Fatalf("received frame %d, want %d", got, i)
			}
		}
		return s.Stats().Writes - before
	}

	s.crowded()
	if w := sendAll(0); w > 2 {
		t.Errorf("crowded: %d frames took %d writes, want them batched into 1 or 2", n, w)
	}
	s.crowdAt.Store(time.Now().Add(-2 * batchAfterCrowd).UnixNano())
	if w := sendAll(n); w != n {
		t.Errorf("no longer crowded: %d frames took %d writes, want one each", n, w)
	}
}

// A server's connection is crowded once work is refused the reader because
// more frames wait behind it.
func TestRefusedInlineWorkCrowdsTheConnection(t *testing.T) {
	crowded := make(chan bool, 16)
	srv := newFuncHandler(func(c Conn, f frame.Frame) {
		c.(conncap.InlineConn).RunInline(work(func() {}), quickGrace)
		crowded <- c.(*stream).crowdedWithin(time.Hour)
	})
	l := listen(t, newTCP(t, "server", nil), srv)
	raw := rawHello(t, l.Addr())

	writeFrames(t, raw, &frame.Cancel{Call: 1})
	if testkit.Receive(t, crowded, "frame 1") {
		t.Fatal("crowded after a frame that came alone")
	}
	writeFrames(t, raw, &frame.Cancel{Call: 2}, &frame.Cancel{Call: 3})
	for i := 2; i <= 3; i++ {
		if !testkit.Receive(t, crowded, fmt.Sprintf("frame %d", i)) {
			t.Fatalf("frame %d: not crowded after work was refused while a frame waited", i)
		}
	}
}
