package transport

import (
	"runtime"
	"time"
)

// A frame sent on a free connection is written at once, by the goroutine
// that sends it: on a quiet connection that is fastest. On a connection
// that many calls share, though, each of those writes is a system call of
// its own, and on loopback the kernel delivers the bytes to the reader
// within it: at dozens of calls at once, writing one frame at a time takes
// most of the CPU. So while the connection is crowded (answers arrive side
// by side with others, or work arrives faster than it is handled), a send
// leaves its frame queued and a flusher writes the queue after the other
// goroutines ready to run have had their turn: the frames they send
// meanwhile go out in the same write. While the reader runs work inline
// (inline.go), a crowded connection needs no flusher: the reader writes
// the queue once the work returns and it has handled what it read, as it
// writes the acks, so the results of a batch of quick handlers leave in
// one write, without a goroutine started and yielding for them.

// batchAfterCrowd is how long after the reader last found the connection
// crowded sends still leave their frames to a flusher.
const batchAfterCrowd = time.Millisecond

// crowded records that the reader just found frames side by side with
// others of their kind.
func (s *stream) crowded() {
	s.crowdAt.Store(time.Now().UnixNano())
}

// crowdedWithin reports whether the reader found the connection crowded
// within d.
func (s *stream) crowdedWithin(d time.Duration) bool {
	at := s.crowdAt.Load()
	return at != 0 && time.Now().UnixNano()-at < int64(d)
}

// flushSoon is the flusher of a crowded connection (see Send): it lets the
// goroutines ready to run go first, so that what they send joins the
// queue, and then writes the queue. Its starter set writing for it.
func (s *stream) flushSoon() {
	runtime.Gosched()
	s.mu.Lock()
	buf := s.takePendingLocked()
	s.mu.Unlock()
	s.flush(buf, 0)
}
