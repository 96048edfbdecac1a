// Command bench-compare measures ffgen next to grpc-go (with a codec that
// passes bytes through), net/rpc and a raw TCP ping-pong, in one run:
// every client and every server in a process of its own on loopback, a
// 7-byte entity key and a 32-byte payload each way, the systems
// interleaved round by round so that a machine that gets busier mid-run
// weighs on all of them alike, and raw TCP checked against a minimal
// ping-pong of two processes, so that its row is the wire's floor. It
// prints a table of latencies, throughput, allocations and memory per
// idle connection, and the ratios (medians of in-round ratios) against the
// project's targets. A second section does the same for replicated writes:
// three-member clusters of ffgen (on disk, and in memory) and of etcd
// itself, embedded (replicated.go, README.md).
//
// Usage:
//
//	go run . [-rounds 10] [-seq 2000] [-dur 1s] [-idle 1000] [-inflight 10000]
//	         [-repl-rounds 10] [-repl-seq 500] [-datadir DIR] [-only rpc|replicated]
//	         [-burners N]
//
// It lives in a module of its own so that the library depends on neither
// grpc-go nor etcd. `make bench-compare` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

func main() {
	if childMain() {
		return
	}
	cfg := defaultConfig()
	flag.IntVar(&cfg.rounds, "rounds", cfg.rounds, "interleaved rounds")
	flag.IntVar(&cfg.seqCalls, "seq", cfg.seqCalls, "sequential calls per system per round")
	flag.DurationVar(&cfg.dur, "dur", cfg.dur, "how long each concurrent phase runs per system per round")
	flag.IntVar(&cfg.idleConns, "idle", cfg.idleConns, "idle connections opened to measure the server's memory per connection")
	flag.IntVar(&cfg.inFlight, "inflight", cfg.inFlight, "long ffgen operations held open during the in-flight phase (0: skip it)")
	flag.IntVar(&cfg.replRounds, "repl-rounds", cfg.replRounds, "interleaved rounds of replicated writes")
	flag.IntVar(&cfg.replSeq, "repl-seq", cfg.replSeq, "sequential replicated writes per system per round")
	flag.StringVar(&cfg.replDataDir, "datadir", "", "where the replicated systems keep their data (default: the system's temporary directory)")
	flag.StringVar(&cfg.pin, "pin", "", `keep every client and server process on one CPU: "one" (all on CPU 0) or "two" (clients on CPU 0, servers on CPU 1); default: where the kernel places them`)
	flag.IntVar(&cfg.burners, "burners", 0, "run beside this many processes that spin on the CPU, started before the first process of the run and stopped after its last")
	only := flag.String("only", "", `run one section: "rpc" or "replicated" (default: both)`)
	strict := flag.Bool("strict", false, "exit 1 if a target is missed")
	flag.StringVar(&cfg.profileDir, "cpuprofile", "", "write CPU profiles of the driver and of every client and server process into this directory")
	flag.StringVar(&cfg.traceDir, "trace", "", "write execution traces of every sequential phase, client and server process, into this directory")
	flag.Parse()
	switch *only {
	case "":
	case "rpc":
		cfg.replicated = false
	case "replicated":
		cfg.rpc = false
	default:
		fmt.Fprintf(os.Stderr, "bench-compare: -only %q: want rpc or replicated\n", *only)
		os.Exit(2)
	}
	cfg.progress = os.Stderr
	for _, dir := range []string{cfg.profileDir, cfg.traceDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench-compare:", err)
			os.Exit(1)
		}
	}
	if cfg.profileDir != "" {
		stop, err := profile(filepath.Join(cfg.profileDir, "driver.pprof"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-compare:", err)
			os.Exit(1)
		}
		defer stop()
	}
	rep, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
	rep.print(os.Stdout)
	if *strict && !rep.allPass() {
		os.Exit(1)
	}
}

// profileEnv passes a child process the file for its CPU profile
// (-cpuprofile); traceEnv the start of the names of the files for its
// execution traces (-trace).
const (
	profileEnv = "BENCH_COMPARE_CPUPROFILE"
	traceEnv   = "BENCH_COMPARE_TRACE"
)

// childMain runs this process as the server, client or ping-pong part its
// environment names (proc.go) and reports whether it did; it exits the
// process if the part fails.
func childMain() bool {
	serve, call, pp := os.Getenv(serveEnv), os.Getenv(clientEnv), os.Getenv(pingPongEnv)
	if serve == "" && call == "" && pp == "" {
		return false
	}
	if cpu := os.Getenv(cpuEnv); cpu != "" {
		n, err := strconv.Atoi(cpu)
		if err == nil {
			err = pinSelf(n)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-compare:", err)
			os.Exit(1)
		}
	}
	if path := os.Getenv(profileEnv); path != "" {
		stop, err := profile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-compare:", err)
			os.Exit(1)
		}
		defer stop()
	}
	var err error
	switch addrs := strings.Split(os.Getenv(addrsEnv), ","); {
	case serve != "":
		err = serveMain(serve, os.Stdin, os.Stdout)
	case call != "":
		err = clientMain(call, addrs, os.Stdin, os.Stdout)
	case pp == "server":
		err = pingPongServerMain(os.Stdin, os.Stdout)
	default:
		err = pingPongClientMain(addrs[0], os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-compare %s%s%s: %v\n", serve, call, pp, err)
		os.Exit(1)
	}
	return true
}

// profile starts a CPU profile written to path; stop ends it.
func profile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// tracer writes the execution traces of a child process's sequential
// phases (-trace), one file each: <traceEnv>-<n>.trace, n counting from
// 1, so that round r's phase is the r-th file. Without traceEnv it does
// nothing.
type tracer struct {
	n int
	f *os.File
}

func (t *tracer) start() error {
	prefix := os.Getenv(traceEnv)
	if prefix == "" || t.f != nil {
		return nil
	}
	t.n++
	f, err := os.Create(fmt.Sprintf("%s-%d.trace", prefix, t.n))
	if err != nil {
		return err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return err
	}
	t.f = f
	return nil
}

func (t *tracer) stop() error {
	if t.f == nil {
		return nil
	}
	trace.Stop()
	err := t.f.Close()
	t.f = nil
	return err
}

func defaultConfig() config {
	return config{rpc: true, replicated: true, rounds: 10, seqCalls: 2000, dur: time.Second, idleConns: 1000, inFlight: 10000,
		replRounds: 10, replSeq: 500}
}
