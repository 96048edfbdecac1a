package transport

import (
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"
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
	// The first phase's flusher may still hold the queue, yielding once
	// before it lets go (on a busy host that takes a while): a send would
	// leave its frame to it.
	s.waitWritten()
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

// batchEvents is a ConnHandler that also hears where batches end
// (conncap.BatchEnder), and records both: each frame as its Call, each end
// as "end". onFrame, if set, runs after a frame is recorded.
type batchEvents struct {
	mu      sync.Mutex
	events  []string
	onFrame func(c Conn, f frame.Frame)
}

func (b *batchEvents) add(e string) {
	b.mu.Lock()
	b.events = append(b.events, e)
	b.mu.Unlock()
}

func (b *batchEvents) HandleFrame(c Conn, f frame.Frame) {
	b.add(fmt.Sprint(f.(*frame.Cancel).Call))
	if b.onFrame != nil {
		b.onFrame(c, f)
	}
}

func (b *batchEvents) HandleBatchEnd()         { b.add("end") }
func (b *batchEvents) HandleClose(Conn, error) {}

// await waits until the events recorded are want.
func (b *batchEvents) await(t *testing.T, want []string) {
	t.Helper()
	var got []string
	testkit.Within(time.Minute, func() bool {
		b.mu.Lock()
		got = slices.Clone(b.events)
		b.mu.Unlock()
		return len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// The reader tells a BatchEnder where each batch of frames ends: once it
// has handled every frame one read brought, and before it runs work that
// may take long, so that what the frames before it left for the batch's
// end does not wait behind that work.
func TestReaderEndsBatches(t *testing.T) {
	b := new(batchEvents)
	b.onFrame = func(c Conn, f frame.Frame) {
		if f.(*frame.Cancel).Call == 5 {
			c.(conncap.InlineConn).RunInline(work(func() { b.add("work") }), quickGrace)
		}
	}
	l := listen(t, newTCP(t, "server", nil), b)
	raw := rawHello(t, l.Addr())

	writeFrames(t, raw, &frame.Cancel{Call: 1}, &frame.Cancel{Call: 2}, &frame.Cancel{Call: 3})
	b.await(t, []string{"1", "2", "3", "end"})
	writeFrames(t, raw, &frame.Cancel{Call: 4}, &frame.Cancel{Call: 5})
	b.await(t, []string{"1", "2", "3", "end", "4", "5", "end", "work", "end"})
}

// A batch that takes long to handle is ended on the way too, as its acks
// are flushed on the way (TestQueueFlushedDuringALongBatch): what its first
// frames left for the batch's end does not wait for the last.
func TestLongBatchEndsOnTheWay(t *testing.T) {
	const n = 32
	b := &batchEvents{onFrame: func(Conn, frame.Frame) { time.Sleep(time.Millisecond) }}
	raw := rawHello(t, listen(t, newTCP(t, "server", nil), b).Addr())
	var fs []frame.Frame
	for call := uint64(1); call <= n; call++ {
		fs = append(fs, &frame.Cancel{Call: call})
	}
	writeFrames(t, raw, fs...)
	var got []string
	testkit.Until(t, "the whole batch", func() bool {
		b.mu.Lock()
		got = slices.Clone(b.events)
		b.mu.Unlock()
		return slices.Contains(got, fmt.Sprint(n))
	})
	if i := slices.Index(got, "end"); i < 0 || i > slices.Index(got, fmt.Sprint(n)) {
		t.Errorf("events %v: no end before the last of %d frames handled 1ms each", got, n)
	}
}
