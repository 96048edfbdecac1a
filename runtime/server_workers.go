package runtime

import (
	"sync"
	"sync/atomic"
	"time"
)

// Handlers run on worker goroutines that, once their execution is done,
// wait a moment for the next one instead of exiting: a new goroutine per
// execution costs an allocation (its closure) and grows a fresh stack every
// time, while a busy server always has a worker that just finished.
type workers struct {
	// Made by init, before the server is shared; safe for concurrent use.
	handoff chan *execution // unbuffered: a send succeeds only when a worker waits
	stop    chan struct{}   // closed when the server closes: idle workers exit
	once    sync.Once       // closes stop
	idle    atomic.Int32    // the workers waiting for an execution
}

const (
	// workerIdle is how long a worker waits for the next execution.
	workerIdle = time.Second
	// maxIdleWorkers bounds the workers waiting at once; the rest exit.
	maxIdleWorkers = 64
)

func (w *workers) init() {
	w.handoff = make(chan *execution)
	w.stop = make(chan struct{})
}

// close makes the idle workers exit, and the busy ones once they are done.
func (w *workers) close() { w.once.Do(func() { close(w.stop) }) }

// start runs e on an idle worker, or on a new one. It never blocks, so it
// may be called with s.mu held.
func (s *Server) start(e *execution) {
	select {
	case s.workers.handoff <- e:
	default:
		go s.work(e)
	}
}

func (s *Server) work(e *execution) {
	w := &s.workers
	var t *time.Timer
	for {
		e.run()
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(workerIdle)
		} else {
			t.Reset(workerIdle)
		}
		select {
		case e = <-w.handoff:
			w.idle.Add(-1)
		case <-t.C:
			w.idle.Add(-1)
			return
		case <-w.stop:
			w.idle.Add(-1)
			t.Stop()
			return
		}
	}
}
