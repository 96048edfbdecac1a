//go:build unix

package main

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
)

// stallWatch measures how long the host leaves an idle process without a
// core: goroutines of this process, which does nothing else while a run
// goes on, sleep stallTick at a time and record how much later than that
// they woke. Where it can (Linux), one such goroutine runs on each CPU,
// its thread bound to it, so that a CPU taken away on its own (a virtual
// machine's core that the hypervisor runs something else on) shows too:
// the processes on it froze, whatever they were asked to do, and a node
// frozen past its heartbeat timeout is taken for dead. The run's figures
// stand beside these, as they stand beside the load average.
type stallWatch struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex      // guards the following
	longest []time.Duration // by CPU (one entry where the watch is not bound to CPUs)
	over    int             // stalls longer than stallReported
}

const (
	stallTick     = 10 * time.Millisecond
	stallReported = 100 * time.Millisecond
)

func watchStalls() *stallWatch {
	n := runtime.NumCPU()
	if !canBindCPU {
		n = 1
	}
	w := &stallWatch{stop: make(chan struct{}), longest: make([]time.Duration, n)}
	for cpu := range n {
		w.wg.Go(func() { w.run(cpu) })
	}
	return w
}

func (w *stallWatch) run(cpu int) {
	if canBindCPU {
		// A CPU outside this process's affinity cannot be bound to: the
		// goroutine then watches unbound, as where there is no binding.
		// The thread is never unlocked, so that it ends with the
		// goroutine: handed back to the runtime still bound, it ran other
		// goroutines, and a process one of them started (the next run's
		// nodes and bankload) inherited the binding, every process of the
		// run on one core of two.
		runtime.LockOSThread()
		bindCPU(cpu)
	}
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
		w.longest[cpu] = max(w.longest[cpu], late)
		if late > stallReported {
			w.over++
		}
		w.mu.Unlock()
	}
}

// end stops the watch and says what it saw.
func (w *stallWatch) end() string {
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, l := range w.longest {
		parts = append(parts, l.Round(time.Millisecond).String())
	}
	what := "longest"
	if len(w.longest) > 1 {
		what = "longest by CPU"
	}
	return fmt.Sprintf("%s %s, %d over %v", what, strings.Join(parts, " "), w.over, stallReported)
}
