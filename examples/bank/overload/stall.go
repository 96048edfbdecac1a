//go:build unix

package main

import (
	"fmt"
	"sync"
	"time"
)

// stallWatch measures how long the host leaves an idle process without a
// core: a goroutine of this process, which does nothing else while a run
// goes on, sleeps stallTick at a time and records how much later than
// that it woke. On a host that freezes its processes now and then (a
// virtual machine whose cores the hypervisor takes away), a node frozen
// past its heartbeat timeout is taken for dead however little it was
// asked to do; the run's figures stand beside this one, as they stand
// beside the load average.
type stallWatch struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex // guards the following
	longest time.Duration
	over    int // stalls longer than stallReported
}

const (
	stallTick     = 10 * time.Millisecond
	stallReported = 100 * time.Millisecond
)

func watchStalls() *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *stallWatch) run() {
	defer close(w.done)
	t := time.NewTimer(stallTick)
	defer t.Stop()
	for {
		start := time.Now()
		t.Reset(stallTick)
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		late := time.Since(start) - stallTick
		w.mu.Lock()
		w.longest = max(w.longest, late)
		if late > stallReported {
			w.over++
		}
		w.mu.Unlock()
	}
}

// end stops the watch and says what it saw.
func (w *stallWatch) end() string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("longest %v, %d over %v", w.longest.Round(time.Millisecond), w.over, stallReported)
}
