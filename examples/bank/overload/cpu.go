//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// cpuWatch measures the CPU each node, the load generator and the whole
// machine used in the middle of a run's load, away from its start and its
// audit. It tells slower work from waiting: on this project's two-core
// virtual machine, a run in a few dozen settles at half the throughput
// with the nodes' CPU per operation unchanged and the machine half idle
// (docs/runtime.md, "Overload"); the generator's share tells whether the
// waiting is on its side.
type cpuWatch struct {
	stop chan struct{}
	done chan struct{}
	res  cpuShare // written by the watch before done closes
}

// cpuShare is what a cpuWatch measured.
type cpuShare struct {
	window  time.Duration
	nodes   []nodeCPU
	load    float64 // the load generator's share of one core
	busy    float64 // the machine's busy cores, all processes
	cores   int
	nodeSum time.Duration // the nodes' CPU time in the window
	err     error
}

type nodeCPU struct {
	name  string
	share float64 // of one core
}

// watchCPU measures from..to after it is called, the nodes and the load
// generator, the process load.
func watchCPU(nodes []*testbed.Node, load *os.Process, from, to time.Duration) *cpuWatch {
	w := &cpuWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.res = w.measure(nodes, load, from, to)
	}()
	return w
}

func (w *cpuWatch) measure(nodes []*testbed.Node, load *os.Process, from, to time.Duration) cpuShare {
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-w.stop:
			return false
		case <-t.C:
			return true
		}
	}
	sample := func() (at time.Time, procs []time.Duration, busy, total int64, err error) {
		at = time.Now()
		for _, n := range nodes {
			d, e := n.CPUTime()
			err = errors.Join(err, e)
			procs = append(procs, d)
		}
		d, e := testbed.ProcessCPUTime(load.Pid)
		err = errors.Join(err, e)
		procs = append(procs, d)
		busy, total, e = machineTicks()
		return at, procs, busy, total, errors.Join(err, e)
	}
	if !wait(from) {
		return cpuShare{err: errors.New("the load ended before the window")}
	}
	t0, p0, b0, all0, err := sample()
	if err != nil {
		return cpuShare{err: err}
	}
	if !wait(to - from) {
		return cpuShare{err: errors.New("the load ended before the window")}
	}
	t1, p1, b1, all1, err := sample()
	if err != nil {
		return cpuShare{err: err}
	}
	s := cpuShare{window: t1.Sub(t0)}
	s.cores = onlineCPUs()
	for i, n := range nodes {
		used := p1[i] - p0[i]
		s.nodeSum += used
		s.nodes = append(s.nodes, nodeCPU{name: n.Name, share: used.Seconds() / s.window.Seconds()})
	}
	s.load = (p1[len(nodes)] - p0[len(nodes)]).Seconds() / s.window.Seconds()
	if all1 > all0 {
		s.busy = float64(b1-b0) / float64(all1-all0) * float64(s.cores)
	}
	return s
}

// end returns what the watch measured, stopping it if the run ended
// before its window did.
func (w *cpuWatch) end() cpuShare {
	close(w.stop)
	<-w.done
	return w.res
}

// machineTicks reads the busy and the total clock ticks of every CPU
// from /proc/stat.
func machineTicks() (busy, total int64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, errors.New("/proc/stat: unexpected format")
	}
	// user nice system idle iowait irq softirq steal (guest time is in
	// user already).
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

// onlineCPUs counts the CPUs /proc/stat has a line for: the machine's,
// whatever this process's affinity.
func onlineCPUs() int {
	b, _ := os.ReadFile("/proc/stat")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			n++
		}
	}
	return max(1, n)
}

// text says what the watch measured, with the nodes' CPU per operation
// at the run's admitted rate.
func (s cpuShare) text(admittedPerSecond float64) string {
	if s.err != nil {
		return "not measured: " + s.err.Error()
	}
	var parts []string
	for _, n := range s.nodes {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", n.name, 100*n.share))
	}
	return fmt.Sprintf("nodes %s of a core, bankload %.0f%%; the machine %.0f%% of %d cores busy; the nodes %.0fµs per admitted op (over %.1fs mid-load)",
		strings.Join(parts, ", "), 100*s.load, 100*s.busy/float64(s.cores), s.cores, s.perOp(admittedPerSecond), s.window.Seconds())
}

// perOp is the nodes' CPU time per operation admitted at rate, in µs.
func (s cpuShare) perOp(rate float64) float64 {
	if s.err != nil || rate <= 0 || s.window <= 0 {
		return 0
	}
	return float64(s.nodeSum.Microseconds()) / (rate * s.window.Seconds())
}
