package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
)

type config struct {
	rpc, replicated bool // the sections to run
	rounds          int
	seqCalls        int
	dur             time.Duration
	idleConns       int
	inFlight        int
	progress        io.Writer // nil: quiet
	profileDir      string    // "": no CPU profiles
	traceDir        string    // "": no execution traces of the sequential phases
	burners         int       // processes spinning on the CPU for the whole run
	pin             string    // where the processes run: pinFree, pinOne or pinTwo
	// The replicated-write section.
	replRounds  int
	replSeq     int    // sequential writes per system per round
	replDataDir string // where the clusters' data directories go ("": the system's temporary directory)
}

// roundResult is one system's figures in one round.
type roundResult struct {
	latency                   // of the sequential calls
	allocsC, allocsS  float64 // per sequential call, client and server process
	cpuC, cpuS        float64 // CPU time per sequential call (ns), client and server process
	switchC, switchS  float64 // context switches per sequential call, client and server process
	cpu64C, cpu64S    float64 // CPU time per call at 64 callers (ns), client and server process
	switch64C         float64 // context switches per call at 64 callers, client and server process together
	tput64, tput256   float64 // calls/s
	tput64InFlight    float64 // calls/s with cfg.inFlight long operations held open
	tput64Arrived     float64 // the same, in the second right after the last of them started (not a target)
	hasInFlightResult bool
	calls, failed     int64  // calls measured, and those that returned an error
	newTerms          uint64 // raft terms begun in the round (replicated systems)
	// Where the sequential calls ran: whether the client's and the
	// server's busiest threads were last on one CPU when the calls ended
	// (placed: whether both could be told).
	oneCPU, placed bool
}

// latency sums up the latencies of sequential calls.
type latency struct{ p50, p90, p99 time.Duration }

// latencyOf sorts lat and returns its percentiles.
func latencyOf(lat []time.Duration) latency {
	slices.Sort(lat)
	n := len(lat)
	return latency{lat[n/2], lat[n*90/100], lat[n*99/100]}
}

type report struct {
	cfg    config
	rounds rounds        // the RPC section's; empty if it did not run
	floor  []roundResult // the minimal ping-pong's sequential figures, by round
	settle time.Duration // the longest wait for the processes to go idle before a sequential phase
	idle   []float64     // server RSS bytes per idle connection, by system
	repl   *replReport   // nil if the replicated-write section did not run
}

// Concurrent phases: how many callers share one client.
const (
	callers     = 64
	manyCallers = 256
)

// run runs the sections cfg asks for.
func run(cfg config) (*report, error) {
	rep := &report{cfg: cfg}
	if err := checkPin(cfg.pin); err != nil {
		return nil, err
	}
	if cfg.burners > 0 {
		b, err := testkit.Burn(cfg.burners)
		if err != nil {
			return nil, fmt.Errorf("-burners %d: %w", cfg.burners, err)
		}
		defer b.Stop()
	}
	if cfg.rpc {
		if err := runRPC(cfg, rep); err != nil {
			return nil, err
		}
	}
	if cfg.replicated {
		repl, err := runReplicated(cfg)
		if err != nil {
			return nil, fmt.Errorf("replicated writes: %w", err)
		}
		rep.repl = repl
	}
	return rep, nil
}

// say prints progress, if cfg asks for it.
func (cfg config) say(format string, args ...any) {
	if cfg.progress != nil {
		fmt.Fprintf(cfg.progress, format+"\n", args...)
	}
}

// procs are the server and client processes of a section's systems.
type procs struct {
	servers []*serverProc
	clients []*clientProc
	pids    []int // of all of them
}

// startProcs starts a server process and a client process for each
// system, each server keeping its data in a directory of its own under
// dataDir if that is set. stop stops them all, those started before an
// error too.
func startProcs(cfg config, systems []*system, dataDir string) (*procs, error) {
	ps := &procs{servers: make([]*serverProc, len(systems)), clients: make([]*clientProc, len(systems))}
	for i, s := range systems {
		dir := ""
		if dataDir != "" {
			dir = filepath.Join(dataDir, fileName(s.name))
		}
		p, err := startServer(s, cfg, dir)
		if err != nil {
			return ps, err
		}
		ps.servers[i] = p
		c, err := startClient(s, p.addrs, cfg)
		if err != nil {
			return ps, err
		}
		ps.clients[i] = c
		ps.pids = append(ps.pids, p.pid(), c.pid())
	}
	return ps, nil
}

func (ps *procs) stop() {
	for i := range ps.servers {
		if ps.clients[i] != nil {
			ps.clients[i].stop()
		}
		if ps.servers[i] != nil {
			ps.servers[i].stop()
		}
	}
}

// runRPC measures the RPC systems and the minimal ping-pong into rep.
func runRPC(cfg config, rep *report) error {
	if cfg.rounds < 1 || cfg.seqCalls < 10 || cfg.dur <= 0 {
		return errors.New("need at least 1 round, 10 sequential calls and a positive duration")
	}
	ps, err := startProcs(cfg, systems, "")
	defer ps.stop()
	if err != nil {
		return err
	}
	servers, clients := ps.servers, ps.clients
	floor, err := startFloor(cfg)
	if err != nil {
		return err
	}
	defer floor.stop()
	pids := append(ps.pids, floor.server.pid(), floor.client.pid())

	for r := range cfg.rounds {
		res := make([]roundResult, len(systems))
		// The sequential phases come first, every system's and the
		// floor's, each once the run's processes are idle: measured
		// right after a concurrent phase, one system's calls ran beside
		// the collector, the timers and the threads that phase left
		// busy, in its own processes or in another system's. Each round
		// starts with the next one, so none is always measured right
		// after the same neighbour.
		for k := range len(systems) + 1 {
			i := (r + k) % (len(systems) + 1)
			rep.settle = max(rep.settle, settle(pids))
			if i == len(systems) {
				var rr roundResult
				if err := measureSequential(cfg.seqCalls, floor.server, floor.client, &rr); err != nil {
					return fmt.Errorf("round %d: minimal ping-pong: %w", r+1, err)
				}
				rep.floor = append(rep.floor, rr)
				continue
			}
			if err := measureSequential(cfg.seqCalls, servers[i], clients[i], &res[i]); err != nil {
				return fmt.Errorf("round %d: %s: %w", r+1, systems[i].name, err)
			}
		}
		for k := range systems {
			i := (r + k) % len(systems)
			if err := measureConcurrent(cfg, systems[i], servers[i], clients[i], &res[i]); err != nil {
				return fmt.Errorf("round %d: %s: %w", r+1, systems[i].name, err)
			}
		}
		rep.rounds = append(rep.rounds, res)
		cfg.say("round %d/%d: p50 ffgen %v, raw TCP %v, minimal ping-pong %v; 64 callers ffgen %.0f calls/s",
			r+1, cfg.rounds, res[ffgenIdx].p50, res[rawIdx].p50, rep.floor[r].p50, res[ffgenIdx].tput64)
	}
	rep.idle = make([]float64, len(systems))
	for i, s := range systems {
		per, err := idleMemory(cfg.idleConns, s, servers[i])
		if err != nil {
			return fmt.Errorf("%s: idle connections: %w", s.name, err)
		}
		rep.idle[i] = per
		cfg.say("%s: %.1f KiB per idle connection", s.name, per/1024)
	}
	return nil
}

// measureSequential times n calls one after the other, on a worker
// warmed up first, and counts the allocations, the CPU time and the
// context switches of both processes.
func measureSequential(n int, p *serverProc, c *clientProc, out *roundResult) error {
	if err := c.warm(seqWarmUp); err != nil {
		return err
	}
	sb, err := p.stats(false)
	if err != nil {
		return err
	}
	if err := p.trace(true); err != nil {
		return err
	}
	ub, us := procUsage(c.pid()), procUsage(p.pid())
	lat, failed, mallocs, err := c.seq(n)
	if err != nil {
		return err
	}
	ua, ut := procUsage(c.pid()), procUsage(p.pid())
	if err := p.trace(false); err != nil {
		return err
	}
	sa, err := p.stats(false)
	if err != nil {
		return err
	}
	out.calls, out.failed = int64(len(lat)), failed
	calls := float64(len(lat))
	out.allocsC = float64(mallocs) / calls
	out.allocsS = float64(sa.mallocs-sb.mallocs) / calls
	out.cpuC, out.cpuS = float64(ua.cpu-ub.cpu)/calls, float64(ut.cpu-us.cpu)/calls
	out.switchC, out.switchS = float64(ua.switches-ub.switches)/calls, float64(ut.switches-us.switches)/calls
	cc, sc := busiestCPU(ub, ua), busiestCPU(us, ut)
	out.placed, out.oneCPU = cc >= 0 && sc >= 0, cc == sc
	out.latency = latencyOf(lat)
	return nil
}

// measureConcurrent measures the throughput of many callers, and for
// ffgen the throughput beside cfg.inFlight long operations.
func measureConcurrent(cfg config, s *system, p *serverProc, c *clientProc, out *roundResult) error {
	var ph phase
	var err error
	ub, us := procUsage(c.pid()), procUsage(p.pid())
	if out.tput64, ph, err = c.concurrent(callers, cfg.dur); err != nil {
		return err
	}
	ua, ut := procUsage(c.pid()), procUsage(p.pid())
	out.add(ph)
	// The phase's set-up (each caller's first call, untimed) is counted
	// too: a few dozen calls beside tens of thousands.
	if calls := float64(ph.calls); calls > 0 {
		out.cpu64C, out.cpu64S = float64(ua.cpu-ub.cpu)/calls, float64(ut.cpu-us.cpu)/calls
		out.switch64C = float64(ua.switches-ub.switches+ut.switches-us.switches) / calls
	}
	if out.tput256, ph, err = c.concurrent(manyCallers, cfg.dur); err != nil {
		return err
	}
	out.add(ph)
	if cfg.inFlight > 0 && s.name == "ffgen" {
		out.tput64InFlight, out.tput64Arrived, ph, err = withInFlight(cfg, p, c)
		out.add(ph)
		out.hasInFlightResult = err == nil
	}
	return err
}

// settle waits until the processes pids have been all but idle for a
// moment (under 5% of a CPU over 20 ms), for at most two seconds, and
// returns how long it waited.
func settle(pids []int) time.Duration {
	const (
		window = 20 * time.Millisecond
		busy   = window / 20
		most   = 2 * time.Second
	)
	start := time.Now()
	last := procUsage(pids...).cpu
	for time.Since(start) < most {
		time.Sleep(window)
		now := procUsage(pids...).cpu
		if now-last < busy {
			break
		}
		last = now
	}
	return time.Since(start)
}

// usage is what threads have run: their CPU time and their context
// switches, voluntary (a thread that waited) or not (one preempted), and
// each thread's own time and the CPU it ran on last.
type usage struct {
	cpu      time.Duration
	switches int64
	threads  map[string]threadUse // by /proc/<pid>/task/<tid>
}

type threadUse struct {
	ran     time.Duration
	lastCPU int
}

// busiestCPU is the CPU on which the thread that ran most between before
// and after ran last, -1 if no thread ran. A sequential call's client or
// server is one thread at a time: with both on one CPU, each message
// hands that CPU from one to the other; on two, each wakes a CPU that
// went idle, which on a virtual machine may cost several times more.
func busiestCPU(before, after usage) int {
	cpu, most := -1, time.Duration(0)
	for t, a := range after.threads {
		if d := a.ran - before.threads[t].ran; d > most {
			cpu, most = a.lastCPU, d
		}
	}
	return cpu
}

// procUsage is the usage of the threads of pids, from
// /proc/<pid>/task/<tid>/schedstat and status; what cannot be read counts
// as nothing. A thread that ended between two readings takes its share
// with it: the Go runtime keeps its threads, so a measured phase loses
// none.
func procUsage(pids ...int) usage {
	u := usage{threads: map[string]threadUse{}}
	for _, pid := range pids {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			dir := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
			if b, err := os.ReadFile(dir + "schedstat"); err == nil {
				if f := strings.Fields(string(b)); len(f) > 0 {
					ns, _ := strconv.ParseInt(f[0], 10, 64)
					u.cpu += time.Duration(ns)
					u.threads[dir] = threadUse{ran: time.Duration(ns), lastCPU: lastCPU(dir)}
				}
			}
			b, err := os.ReadFile(dir + "status")
			if err != nil {
				continue
			}
			for line := range strings.Lines(string(b)) {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
					n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					u.switches += n
				}
			}
		}
	}
	return u
}

// lastCPU is the CPU the thread of /proc directory dir ran on last
// (proc(5): field 39 of stat, "processor"), -1 if it cannot be read.
func lastCPU(dir string) int {
	f, err := testkit.StatFields(dir + "stat")
	if err != nil || len(f) < 37 {
		return -1
	}
	cpu, err := strconv.Atoi(f[36])
	if err != nil {
		return -1
	}
	return cpu
}

// phase counts the calls of one measurement.
type phase struct{ calls, failed int64 }

func (rr *roundResult) add(p phase) {
	rr.calls += p.calls
	rr.failed += p.failed
}

// keys are the entity keys calls use: 7 bytes each, made before any
// measurement so that making them is not counted.
var keys = func() []string {
	out := make([]string, 1<<14)
	for i := range out {
		out[i] = fmt.Sprintf("k%06d", i)
	}
	return out
}()

func key(i int) string { return keys[i%len(keys)] }

var payload = make([]byte, payloadLen)

// sequential makes n calls one after the other and returns their
// latencies and how many failed.
func sequential(c client, n int) ([]time.Duration, int64) {
	call, done := c.worker()
	defer done()
	lat := make([]time.Duration, n)
	return lat, timeCalls(call, lat)
}

// timeCalls makes len(lat) calls one after the other, recording each one's
// latency in lat, failed or not, and returns how many failed. It allocates
// nothing itself.
func timeCalls(call func(string, []byte) error, lat []time.Duration) (failed int64) {
	for i := range lat {
		start := time.Now()
		if err := call(key(i%256), payload); err != nil {
			failed++
			reportFailure(err)
		}
		lat[i] = time.Since(start)
	}
	return failed
}

// reportFailure logs the first few failed calls: a failure is a result
// (counted in the table), not a reason to stop.
func reportFailure(err error) {
	if n := failuresLogged.Add(1); n <= 5 {
		fmt.Fprintln(os.Stderr, "bench-compare: call failed:", err)
	}
}

var failuresLogged atomic.Int64

// concurrent runs callers goroutines calling as fast as they can for d
// and returns the successful calls per second.
func concurrent(c client, callers int, d time.Duration) (float64, phase) {
	var count, failed atomic.Int64
	var stop atomic.Bool
	var ready, wg sync.WaitGroup
	startGate := make(chan struct{})
	for g := range callers {
		ready.Add(1)
		wg.Go(func() {
			call, done := c.worker()
			defer done()
			// Connect (raw TCP) before the clock starts.
			call(key(g*64), payload)
			ready.Done()
			<-startGate
			for i := 0; !stop.Load(); i++ {
				if err := call(key(g*64+i%64), payload); err != nil {
					failed.Add(1)
					reportFailure(err)
					continue
				}
				count.Add(1)
			}
		})
	}
	ready.Wait()
	start := time.Now()
	close(startGate)
	time.Sleep(d)
	stop.Store(true)
	n, f := count.Load(), failed.Load()
	elapsed := time.Since(start)
	wg.Wait()
	return float64(n) / elapsed.Seconds(), phase{calls: n + f, failed: f}
}

// withInFlight holds cfg.inFlight long operations open on the server and
// measures the 64-caller throughput beside them, after a first phase whose
// throughput it also returns.
func withInFlight(cfg config, p *serverProc, c *clientProc) (tput, first float64, ph phase, err error) {
	// They start in steps, as load builds up in production: what is
	// measured is throughput beside them, not a burst of 10,000 arrivals
	// on two cores.
	const step = 500
	for started := 0; started < cfg.inFlight; {
		n := min(step, cfg.inFlight-started)
		if err := c.hold(n); err != nil {
			return 0, 0, phase{}, err
		}
		started += n
		if err := waitFor(p, func(st serverStats) bool { return st.held >= started }); err != nil {
			c.unhold()
			return 0, 0, phase{}, fmt.Errorf("%d long operations did not all start: %w", cfg.inFlight, err)
		}
	}
	// The callers run once unmeasured beside them, as every system is
	// warmed up before it is measured: what settles in that time (the
	// collector's cycles over the heap the arrivals grew, the first
	// heartbeats for all of them) is the cost of their arrival, which the
	// steps above already spread out, not of holding them.
	// Its calls count among the calls made, and any that failed among
	// the failed ones.
	first, ph, err = c.concurrent(callers, cfg.dur)
	if err != nil {
		c.unhold()
		return 0, 0, phase{}, err
	}
	tput, measured, err := c.concurrent(callers, cfg.dur)
	failedHolds, uerr := c.unhold()
	if err = cmp.Or(err, uerr); err != nil {
		return 0, 0, phase{}, err
	}
	ph.calls += measured.calls + failedHolds
	ph.failed += measured.failed + failedHolds
	// The next system must not be measured while this server still
	// winds the long operations down.
	return tput, first, ph, waitFor(p, func(st serverStats) bool { return st.held == 0 })
}

// waitFor polls the server until ok holds, for at most a minute.
func waitFor(p *serverProc, ok func(serverStats) bool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := p.stats(false)
		if err != nil {
			return err
		}
		if ok(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server still at %d connections, %d long operations after a minute", st.conns, st.held)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idleMemory opens n connections to s, each used for one call and then
// left idle, and returns the server's resident memory per connection.
func idleMemory(n int, s *system, p *serverProc) (float64, error) {
	if n <= 0 {
		return 0, nil
	}
	base, err := settled(p)
	if err != nil {
		return 0, err
	}
	type idle struct {
		c    client
		done func()
	}
	var open []idle
	defer func() {
		for _, o := range open {
			o.done()
			o.c.close()
		}
	}()
	for i := range n {
		c, err := s.dial(p.addrs)
		if err != nil {
			return 0, err
		}
		call, done := c.worker()
		open = append(open, idle{c, done})
		if err := call(key(i), payload); err != nil {
			reportFailure(err)
		}
	}
	if err := waitFor(p, func(st serverStats) bool { return st.conns >= base.conns+n }); err != nil {
		return 0, err
	}
	// Let the connections settle into idleness (ffgen's heartbeat tickers
	// linger a few intervals after the last call).
	time.Sleep(time.Second)
	st, err := settled(p)
	if err != nil {
		return 0, err
	}
	return float64(st.rss-base.rss) / float64(st.conns-base.conns), nil
}

// settled returns the server's stats once its resident memory, given
// back to the OS before each reading, stops falling: a server that has
// just wound down 10,000 operations frees their goroutines' memory over
// the next moments, and a baseline taken meanwhile made the connections
// opened after it look free (a negative figure on a busy machine).
func settled(p *serverProc) (serverStats, error) {
	st, err := p.stats(true)
	for i := 0; err == nil && i < 20; i++ {
		time.Sleep(250 * time.Millisecond)
		var next serverStats
		if next, err = p.stats(true); err != nil {
			break
		}
		falling := next.rss < st.rss-st.rss/100
		st = next
		if !falling {
			break
		}
	}
	return st, err
}
