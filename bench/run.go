package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
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
	// The replicated-write section.
	replRounds  int
	replSeq     int    // sequential writes per system per round
	replDataDir string // where the clusters' data directories go ("": the system's temporary directory)
}

// roundResult is one system's figures in one round.
type roundResult struct {
	p50, p99          time.Duration
	allocsC, allocsS  float64 // per sequential call, client and server process
	tput64, tput256   float64 // calls/s
	tput64InFlight    float64 // calls/s with cfg.inFlight long operations held open
	tput64Arrived     float64 // the same, in the second right after the last of them started (not a target)
	hasInFlightResult bool
	calls, failed     int64  // calls measured, and those that returned an error
	newTerms          uint64 // raft terms begun in the round (replicated systems)
}

type report struct {
	cfg    config
	rounds rounds    // the RPC section; empty if it did not run
	idle   []float64 // server RSS bytes per idle connection, by system
	repl   *replReport
}

// Concurrent phases: how many callers share one client.
const (
	callers     = 64
	manyCallers = 256
)

// run runs the sections cfg asks for.
func run(cfg config) (*report, error) {
	rep := &report{cfg: cfg}
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

// runRPC measures the RPC systems into rep.
func runRPC(cfg config, rep *report) error {
	if cfg.rounds < 1 || cfg.seqCalls < 10 || cfg.dur <= 0 {
		return errors.New("need at least 1 round, 10 sequential calls and a positive duration")
	}
	procs, clients, stop, err := startAll(cfg, systems, 500, "")
	defer stop()
	if err != nil {
		return err
	}
	for r := range cfg.rounds {
		res := make([]roundResult, len(systems))
		// Each round starts with the next system, so none is always
		// measured right after the same neighbour.
		for k := range systems {
			i := (r + k) % len(systems)
			if err := measure(cfg, systems[i], procs[i], clients[i], &res[i]); err != nil {
				return fmt.Errorf("round %d: %s: %w", r+1, systems[i].name, err)
			}
		}
		rep.rounds = append(rep.rounds, res)
		cfg.say("round %d/%d: ffgen p50 %v, 64 callers %.0f calls/s", r+1, cfg.rounds, res[0].p50, res[0].tput64)
	}
	rep.idle = make([]float64, len(systems))
	for i, s := range systems {
		per, err := idleMemory(cfg.idleConns, s, procs[i])
		if err != nil {
			return fmt.Errorf("%s: idle connections: %w", s.name, err)
		}
		rep.idle[i] = per
		cfg.say("%s: %.1f KiB per idle connection", s.name, per/1024)
	}
	return nil
}

// startAll starts a server process for each system (each keeping its
// data in a directory of its own under dataDir, if that is set), dials
// it, and warms it up with warm calls: connections, pools, the caches of
// every layer. stop closes the clients and stops the processes, those
// started before an error too.
func startAll(cfg config, systems []*system, warm int, dataDir string) (procs []*serverProc, clients []client, stop func(), err error) {
	procs = make([]*serverProc, len(systems))
	clients = make([]client, len(systems))
	stop = func() {
		for i := range systems {
			if clients[i] != nil {
				clients[i].close()
			}
			if procs[i] != nil {
				procs[i].stop()
			}
		}
	}
	for i, s := range systems {
		dir := ""
		if dataDir != "" {
			dir = filepath.Join(dataDir, fileName(s.name))
		}
		p, err := startServer(s, cfg.profileDir, dir)
		if err != nil {
			return procs, clients, stop, err
		}
		procs[i] = p
		c, err := s.dial(p.addrs)
		if err != nil {
			return procs, clients, stop, fmt.Errorf("%s: dial: %w", s.name, err)
		}
		clients[i] = c
		if _, failed := sequential(c, warm); failed == int64(warm) {
			return procs, clients, stop, fmt.Errorf("%s: every warm-up call failed", s.name)
		}
	}
	return procs, clients, stop, nil
}

// fileName turns a system's name into a file name.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return '-'
	}, name)
}

func measure(cfg config, s *system, p *serverProc, c client, out *roundResult) error {
	var before, after goruntime.MemStats
	call, done := c.worker()
	lat := make([]time.Duration, cfg.seqCalls)
	sb, err := p.stats(false)
	if err != nil {
		return err
	}
	goruntime.ReadMemStats(&before)
	failed := timeCalls(call, lat)
	goruntime.ReadMemStats(&after)
	done()
	out.calls, out.failed = int64(len(lat)), failed
	sa, err := p.stats(false)
	if err != nil {
		return err
	}
	n := float64(len(lat))
	out.allocsC = float64(after.Mallocs-before.Mallocs) / n
	out.allocsS = float64(sa.mallocs-sb.mallocs) / n
	slices.Sort(lat)
	out.p50, out.p99 = lat[len(lat)/2], lat[len(lat)*99/100]

	var ph phase
	out.tput64, ph = concurrent(c, callers, cfg.dur)
	out.add(ph)
	out.tput256, ph = concurrent(c, manyCallers, cfg.dur)
	out.add(ph)
	if cfg.inFlight > 0 && s.name == "ffgen" {
		out.tput64InFlight, out.tput64Arrived, ph, err = withInFlight(cfg, p, c)
		out.add(ph)
		out.hasInFlightResult = err == nil
	}
	return err
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
func withInFlight(cfg config, p *serverProc, c client) (tput, first float64, ph phase, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var holdsFailed atomic.Int64
	stopHolds := func() {
		cancel()
		wg.Wait()
	}
	// They start in steps, as load builds up in production: what is
	// measured is throughput beside them, not a burst of 10,000 arrivals
	// on two cores.
	const step = 500
	for started := 0; started < cfg.inFlight; {
		n := min(step, cfg.inFlight-started)
		for i := started; i < started+n; i++ {
			wg.Go(func() {
				// Keys of their own, so the measured calls do not
				// queue behind them. One that fails is counted and
				// made again, so that the count stays.
				key := fmt.Sprintf("h%06d", i)
				for ctx.Err() == nil {
					if err := c.hold(ctx, key); err != nil && ctx.Err() == nil {
						holdsFailed.Add(1)
						reportFailure(err)
						// A failure can be immediate (no failover
						// budget left): do not spin on it.
						time.Sleep(50 * time.Millisecond)
					}
				}
			})
		}
		started += n
		if err := waitFor(p, func(st serverStats) bool { return st.held >= started }); err != nil {
			stopHolds()
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
	first, ph = concurrent(c, callers, cfg.dur)
	tput, measured := concurrent(c, callers, cfg.dur)
	stopHolds()
	ph.calls += measured.calls + holdsFailed.Load()
	ph.failed += measured.failed + holdsFailed.Load()
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
