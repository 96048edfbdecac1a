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
	"github.com/ffgen/ffgen/internal/testkit"
)

// cpuWatch measures the CPU each node, the load generator and the whole
// machine used in the middle of a run's load, away from its start and its
// audit. It tells slower work from waiting, and waiting from a run that
// had less of the machine: runs at half the throughput, with the nodes'
// CPU per operation unchanged, had every process's share halved and the
// machine half idle, all of them bound to one core by the stall watch's
// threads (docs/runtime.md, "Overload").
type cpuWatch struct {
	stop chan struct{}
	done chan struct{}
	res  cpuShare // written by the watch before done closes
}

// cpuShare is what a cpuWatch measured.
type cpuShare struct {
	window time.Duration
	nodes  []nodeCPU
	load   float64 // the load generator's share of one core
	// bound names the processes that may not run on every CPU, with
	// the CPUs they may: a run measured on part of the machine.
	bound   []string
	busy    float64 // the machine's busy cores, all processes
	cores   int
	nodeSum time.Duration // the nodes' CPU time in the window
	err     error
}

type nodeCPU struct {
	name  string
	share float64 // of one core
}

// watchCPU measures, from..to after it is called, the nodes and load, the
// load generator's process.
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
		d, e := testkit.ProcessCPUTime(load.Pid)
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
	cores := onlineCPUs()
	var bound []string
	check := func(name string, pid int) {
		if cpus, n, err := allowedCPUs(pid); err == nil && n < cores {
			bound = append(bound, fmt.Sprintf("%s to CPU %s", name, cpus))
		}
	}
	for _, n := range nodes {
		if pid, ok := n.Pid(); ok {
			check(n.Name, pid)
		}
	}
	check("bankload", load.Pid)
	if !wait(to - from) {
		return cpuShare{err: errors.New("the load ended before the window")}
	}
	t1, p1, b1, all1, err := sample()
	if err != nil {
		return cpuShare{err: err}
	}
	s := cpuShare{window: t1.Sub(t0), bound: bound}
	s.cores = cores
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

// allowedCPUs reads the CPUs process pid may run on, as /proc lists them,
// and how many they are.
func allowedCPUs(pid int) (list string, n int, err error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	if list, err = allowedCPUList(path); err != nil {
		return "", 0, err
	}
	if n, err = countCPUs(list); err != nil {
		return "", 0, fmt.Errorf("%s: %w", path, err)
	}
	return list, n, nil
}

// allowedCPUList reads the Cpus_allowed_list of a /proc status file, a
// process's or a thread's.
func allowedCPUList(status string) (string, error) {
	b, err := os.ReadFile(status)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("%s: no Cpus_allowed_list", status)
}

// countCPUs counts the CPUs of a list as /proc writes it: "0-3,8,10-11".
func countCPUs(list string) (int, error) {
	n := 0
	for r := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		z, err2 := strconv.Atoi(hi)
		if err := errors.Join(err1, err2); err != nil || z < a {
			return 0, fmt.Errorf("CPU list %q: not a list of CPUs", list)
		}
		n += z - a + 1
	}
	return n, nil
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
	text := fmt.Sprintf("nodes %s of a core, bankload %.0f%%; the machine %.0f%% of %d cores busy; the nodes %.0fµs per admitted op (over %.1fs mid-load)",
		strings.Join(parts, ", "), 100*s.load, 100*s.busy/float64(s.cores), s.cores, s.perOp(admittedPerSecond), s.window.Seconds())
	if len(s.bound) > 0 {
		text += "; BOUND: " + strings.Join(s.bound, ", ")
	}
	return text
}

// perOp is the nodes' CPU time per operation admitted at rate, in µs.
func (s cpuShare) perOp(rate float64) float64 {
	if s.err != nil || rate <= 0 || s.window <= 0 {
		return 0
	}
	return float64(s.nodeSum.Microseconds()) / (rate * s.window.Seconds())
}
