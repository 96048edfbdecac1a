// Command bankattack measures how one banknode process holds up against
// hostile connections: it starts the node on loopback, runs an honest
// client at a fixed rate, and then, one kind at a time, opens -conns
// hostile connections to the node's fast-failover port:
//
//	no-hello   connect and send nothing
//	stalled    a Hello, then a frame announcing 4 MiB, 1 MiB of it, silence
//	garbage    bytes that are no frame at all
//	bomb       a Hello, then a length prefix of 0xFFFFFFFF
//	truncated  a Hello cut short, then silence
//	all        every kind above at once
//	none       no connection: the honest load alone, the control for the
//	           other kinds' memory figures
//
// For each kind it reports the node's RSS growth (peak over idle), its RSS
// 30 s after the hostile connections closed, how long the node took to
// close the stalled connections, and the honest client's p99 during the
// attack next to its p99 in the window just before it: -rounds attacks per
// kind, each after a baseline of its own, and the median of the rounds'
// ratios; with them, the node's refusal and pacing counters, the CPU
// time of the node and of the attacker, and the bytes the node read in the
// baseline and attack windows. -profile saves a CPU profile (or,
// with -trace, an execution trace) of the node during each attack. With
// -decoy the hostile connections go to a second node in a process of its
// own, and the honest client's figures show what the attack costs it
// through the shared machine alone. It is a measurement, not a test:
//
//	go run ./examples/bank/cmd/bankattack
//
// The hostile connections come from a child process run under nice(1):
// on one machine the attacker shares the node's cores, which a real one
// would not, and in the honest client's process its garbage collections
// would count against the client.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/transport"
)

var (
	verbose     = flag.Bool("v", false, "print the first error of each honest caller")
	niceness    = flag.Int("attacker-nice", 10, "nice(1) level of the attacking process (0: not niced)")
	hostile     = flag.String("hostile", "", "internal: run as the attacker with this kind")
	hostileAddr = flag.String("addr", "", "internal: the attacker's target")
	profileDir  = flag.String("profile", "", "save a CPU profile of the node during each attack into this directory")
	traceAttack = flag.Bool("trace", false, "with -profile, save an execution trace of each attack's first 3 s instead (go tool trace -pprof=sched shows where goroutines waited)")
	nodeStderr  = flag.String("node-stderr", "", "append the node's standard error to this file (with GODEBUG=gctrace=1, its collections)")
	decoy       = flag.Bool("decoy", false, "attack a second node, in a process of its own, instead of the measured one: what the attack costs the honest client through the machine alone (the attacker and the kernel's work for it on the same cores)")
)

// attacker is the child process: it attacks when told "go" on stdin and
// closes everything when stdin ends, then prints its report.
func attacker(addr, kind string, n int) {
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	a := attack(addr, kind, n)
	io.Copy(io.Discard, in)
	a.closeAll()
	fmt.Println(a.report())
}

// spawnAttacker starts the attacking child process for kind; writing to
// the returned pipe starts the attack, closing it ends it.
func spawnAttacker(addr, kind string, n int) (io.WriteCloser, func() string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	args := []string{self, "-hostile", kind, "-addr", addr, "-conns", strconv.Itoa(n)}
	if *niceness != 0 {
		args = append([]string{"nice", "-n", strconv.Itoa(*niceness)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return in, func() string {
		cmd.Wait()
		cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		return fmt.Sprintf("%s; attacker CPU %.2f s", strings.TrimSpace(out.String()), cpu.Seconds())
	}, nil
}

func main() {
	var (
		node   = flag.String("banknode", "", "banknode binary (default: build it with go build)")
		conns  = flag.Int("conns", 1000, "hostile connections per kind")
		kinds  = flag.String("kinds", "no-hello,stalled,garbage,bomb,truncated,all", "kinds of attack, comma-separated")
		window = flag.Duration("window", 10*time.Second, "how long each attack and the baseline run")
		settle = flag.Duration("settle", 30*time.Second, "wait after the hostile connections closed before measuring RSS")
		rate   = flag.Int("rate", 500, "honest operations per second")
		rounds = flag.Int("rounds", 3, "attacks per kind, each after a baseline window of its own")
	)
	flag.Parse()
	if *hostile != "" {
		attacker(*hostileAddr, *hostile, *conns)
		return
	}
	if err := run(*node, *conns, strings.Split(*kinds, ","), *window, *settle, *rate, max(*rounds, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "bankattack:", err)
		os.Exit(1)
	}
}

func run(bin string, conns int, kinds []string, window, settle time.Duration, rate, rounds int) error {
	dir, err := os.MkdirTemp("", "bankattack")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "banknode")
		build := exec.Command("go", "build", "-o", bin, "./examples/bank/cmd/banknode")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building banknode (run from the repository root): %w", err)
		}
	}
	nd, stop, err := startNode(bin, "a1")
	if err != nil {
		return err
	}
	defer stop()
	rpc, pid := nd.rpc, nd.pid
	// The node the hostile connections go to, and whose counters count
	// them: the measured one, or with -decoy a second node in a process of
	// its own, which leaves the measured node only the machine's share.
	target := nd
	if *decoy {
		d, stopDecoy, err := startNode(bin, "decoy")
		if err != nil {
			return err
		}
		defer stopDecoy()
		target = d
	}

	h, err := newHonest(rpc, rate)
	if err != nil {
		return err
	}
	defer h.close()
	h.measure(3 * time.Second) // warm up
	time.Sleep(2 * time.Second)
	idle := rss(pid)
	fmt.Printf("node pid %d, rpc %s; %d hostile connections per kind; honest load %d ops/s\n", pid, rpc, conns, rate)
	if *decoy {
		fmt.Printf("hostile connections go to a decoy node, pid %d, rpc %s: the measured node only shares the machine with them\n", target.pid, target.rpc)
	}
	fmt.Printf("idle RSS %.1f MB\n\n", mb(idle))

	first := idle
	for _, kind := range kinds {
		idle := rss(pid)
		counted := transportCounters(target.mgmt)
		var peak atomic.Int64
		var ratios []float64
		var base, during latencies
		var cpuBase, cpuDuring time.Duration
		var readBase, readDuring int64
		var closed []string
		for r := range rounds {
			// A baseline of its own, just before each attack: on a shared
			// machine the load from elsewhere drifts more than an attack
			// moves the latency, so each round compares the two windows
			// next to each other, and the rounds' median ratio is the
			// figure.
			cpu0, read0 := cpuTime(pid), readBytes(pid)
			b := h.measure(window)
			cpuBase += cpuTime(pid) - cpu0
			readBase += readBytes(pid) - read0
			start, report, err := spawnAttacker(target.rpc, kind, conns)
			if err != nil {
				return err
			}
			stopSample := sample(pid, &peak)
			stopProfile := profile(target.mgmt, window, fmt.Sprintf("%s-%d", kind, r+1))
			fmt.Fprintln(start, "go")
			cpu1, read1 := cpuTime(pid), readBytes(pid)
			d := h.measure(window)
			cpuDuring += cpuTime(pid) - cpu1
			readDuring += readBytes(pid) - read1
			start.Close()
			closed = append(closed, report())
			stopSample()
			stopProfile()
			ratios = append(ratios, float64(d.p99)/float64(b.p99))
			base, during = base.add(b), during.add(d)
			if r < rounds-1 {
				// Let the node close what is left before the next baseline.
				h.measure(2 * time.Second)
			}
		}
		// The honest client keeps calling while the node settles: giving
		// memory back has a cost of its own.
		settling := h.measure(settle)
		after := rss(pid)
		slices.Sort(ratios)
		fmt.Printf("%-10s RSS before %.1f MB, peak +%.1f MB; %v after close %.1f MB: %+.1f MB from before, %+.1f MB from the first idle\n",
			kind, mb(idle), mb(peak.Load()-idle), settle, mb(after), mb(after-idle), mb(after-first))
		fmt.Printf("%-10s node CPU: %.2f s before, %.2f s during the attacks (%d rounds of %v each); bytes it read: %.1f MB before, %.1f MB during\n",
			"", cpuBase.Seconds(), cpuDuring.Seconds(), rounds, window, mb(readBase), mb(readDuring))
		fmt.Printf("%-10s honest just before: %s\n", "", base)
		fmt.Printf("%-10s honest during attack: %s\n", "", during)
		fmt.Printf("%-10s honest p99 during / just before, per round: %s; median %.2fx\n", "", fmtRatios(ratios), ratios[len(ratios)/2])
		fmt.Printf("%-10s honest in the %v after:  %s\n", "", settle, settling)
		for r, c := range closed {
			fmt.Printf("%-10s round %d, connections closed by the node: %s\n", "", r+1, c)
		}
		fmt.Printf("%-10s node's refusal and pacing counters over the rounds: %s\n", "", countersSince(counted, transportCounters(target.mgmt)))
		fmt.Println()
	}
	return nil
}

// node is a banknode process started by startNode.
type node struct {
	rpc, mgmt string
	pid       int
}

// startNode starts banknode bin as a single-node cluster of its own on
// loopback, with the writes' memory bounded, and waits until it serves;
// stop interrupts it and waits for it to exit.
func startNode(bin, name string) (nd node, stop func(), err error) {
	rpc, gossip, mgmt := freePort(), freePort(), freePort()
	cmd := exec.Command(bin, "-name", name, "-group", "a", "-groups", "a,b",
		"-rpc", rpc, "-gossip", gossip, "-mgmt", mgmt, "-gossip-preset", "local", "-log-level", "error",
		// The ledger remembers every write's outcome for idempotency and
		// journals it, and the replica keeps a log of recent writes;
		// bounded low, the honest writes do not grow the node's memory
		// over the run, which would blur what the attacks leave behind.
		"-remember", "1024", "-journal", "1024")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	var logFile *os.File
	if *nodeStderr != "" {
		if logFile, err = os.OpenFile(*nodeStderr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return node{}, nil, err
		}
		cmd.Stderr = logFile
	}
	if err := cmd.Start(); err != nil {
		return node{}, nil, err
	}
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
	}
	if err := waitDial(rpc, 20*time.Second); err != nil {
		stop()
		return node{}, nil, err
	}
	// Its replica answers once it has settled that it is alone.
	if err := waitReady(mgmt, 20*time.Second); err != nil {
		stop()
		return node{}, nil, err
	}
	return node{rpc: rpc, mgmt: mgmt, pid: cmd.Process.Pid}, stop, nil
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitDial(addr string, limit time.Duration) error {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("node at %s did not come up within %v", addr, limit)
}

// rss is the resident set of pid in bytes, from /proc.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// cpuTime is the user and system CPU time pid has used, 0 if it cannot
// be read.
func cpuTime(pid int) time.Duration {
	d, _ := testkit.ProcessCPUTime(pid)
	return d
}

// readBytes is what pid has read through system calls, sockets included,
// from /proc (rchar); 0 if it cannot be read.
func readBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// profile saves a CPU profile of the node over the next window into
// -profile, if set, as name.pprof (or a trace of its start, with -trace);
// the returned func waits for it.
func profile(mgmt string, window time.Duration, name string) func() {
	if *profileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// One second short of the window: the management server cuts off
		// responses that take longer than 10 s.
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", mgmt, max(1, int(window.Seconds())-1))
		if *traceAttack {
			url = fmt.Sprintf("http://%s/debug/pprof/trace?seconds=3", mgmt)
			name += ".trace"
		}
		resp, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bankattack: profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(*profileDir, name+".pprof"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bankattack: profile:", err)
			return
		}
		defer f.Close()
		io.Copy(f, resp.Body)
	})
	return wg.Wait
}

// sample records the peak RSS of pid every 50 ms until stopped.
func sample(pid int, peak *atomic.Int64) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if r := rss(pid); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// honest is a client calling the node at a fixed rate.
type honest struct {
	c    *runtime.Client
	acc  *bank.AccountsClient
	rate int
}

func newHonest(addr string, rate int) (*honest, error) {
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "honest", Group: "load", Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		return nil, err
	}
	s := runtime.DefaultSettings()
	s.Groups = []string{"a", "b"}
	members := runtime.NewStaticMembership(runtime.Member{Name: "a1", Group: "a", Addr: addr, Services: []string{bank.AccountsDesc.Name}})
	c, err := runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: members, Settings: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	h := &honest{c: c, acc: bank.NewAccountsClient(c), rate: rate}
	for i := range 16 {
		if _, err := h.acc.Open(context.Background(), bank.OpenRequest{AccountID: account(i), Initial: 1000}); err != nil {
			c.Close()
			return nil, fmt.Errorf("opening accounts: %w", err)
		}
	}
	return h, nil
}

func account(i int) string { return fmt.Sprintf("attack-%02d", i) }

func (h *honest) close() { h.c.Close() }

type latencies struct {
	n, errs  int
	p50, p99 time.Duration
	max      time.Duration
	all      []time.Duration // sorted
}

// add merges two windows' latencies.
func (l latencies) add(o latencies) latencies {
	all := append(slices.Clone(l.all), o.all...)
	slices.Sort(all)
	return summarize(all, l.errs+o.errs)
}

func summarize(all []time.Duration, errs int) latencies {
	if len(all) == 0 {
		return latencies{errs: errs}
	}
	return latencies{n: len(all), errs: errs, p50: all[len(all)/2], p99: all[len(all)*99/100], max: all[len(all)-1], all: all}
}

func fmtRatios(rs []float64) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprintf("%.2fx", r)
	}
	return strings.Join(s, " ")
}

func (l latencies) String() string {
	return fmt.Sprintf("%d ops, %d errors, p50 %v, p99 %v, max %v", l.n, l.errs, l.p50.Round(time.Microsecond), l.p99.Round(time.Microsecond), l.max.Round(time.Microsecond))
}

// measure runs deposits and balance reads, alternating, at the client's
// rate for d, from 4 callers, and returns their latencies.
func (h *honest) measure(d time.Duration) latencies {
	const callers = 4
	var mu sync.Mutex
	var all []time.Duration
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			t := time.NewTicker(time.Second * callers / time.Duration(h.rate))
			defer t.Stop()
			var mine []time.Duration
			bad := 0
			for i := 0; time.Now().Before(end); i++ {
				<-t.C
				acct := account((w*7 + i) % 16)
				start := time.Now()
				var err error
				if i%2 == 0 {
					_, err = h.acc.Deposit(context.Background(), bank.DepositRequest{AccountID: acct, Amount: 1})
				} else {
					_, err = h.acc.Balance(context.Background(), acct)
				}
				mine = append(mine, time.Since(start))
				if err != nil {
					bad++
					if bad == 1 && *verbose {
						fmt.Fprintln(os.Stderr, "honest error:", err)
					}
				}
			}
			mu.Lock()
			all = append(all, mine...)
			errs += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(all)
	return summarize(all, errs)
}

// payloads returns what a hostile connection of kind sends.
func payloads(kind string) [][]byte {
	hello, _ := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "hostile", Group: "x"}, 0)
	switch kind {
	case "no-hello":
		return [][]byte{nil}
	case "stalled":
		b := binary.BigEndian.AppendUint32(append([]byte(nil), hello...), 4<<20)
		b = append(b, frame.Version, 2)
		return [][]byte{append(b, make([]byte, 1<<20)...)}
	case "garbage":
		return [][]byte{[]byte("\x00\x00\x00\x20\x07this is not a frame of any kind!!")}
	case "bomb":
		return [][]byte{append(append([]byte(nil), hello...), 0xff, 0xff, 0xff, 0xff)}
	case "truncated":
		return [][]byte{hello[:len(hello)-3]}
	case "none":
		return nil
	case "all":
		var out [][]byte
		for _, k := range []string{"no-hello", "stalled", "garbage", "bomb", "truncated"} {
			out = append(out, payloads(k)...)
		}
		return out
	}
	panic("unknown kind " + kind)
}

// assault is one kind's hostile connections.
type assault struct {
	kind     string
	mu       sync.Mutex
	conns    []net.Conn
	closedIn []time.Duration // from the last byte sent to the node's close
	refused  int             // could not connect or closed before the last byte
	open     atomic.Int32
	wg       sync.WaitGroup
}

// attack opens n connections per payload of kind, 64 dials at a time, and
// watches each until the node closes it.
func attack(addr, kind string, n int) *assault {
	a := &assault{kind: kind}
	sem := make(chan struct{}, 64)
	for _, p := range payloads(kind) {
		for range n {
			sem <- struct{}{}
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			<-sem
			if err != nil {
				a.mu.Lock()
				a.refused++
				a.mu.Unlock()
				continue
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
			a.open.Add(1)
			a.wg.Go(func() { a.watch(c, p) })
		}
	}
	return a
}

func (a *assault) watch(c net.Conn, p []byte) {
	defer a.open.Add(-1)
	c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(p); err != nil {
		a.mu.Lock()
		a.refused++
		a.mu.Unlock()
		return
	}
	sent := time.Now()
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, net.ErrClosed) {
		return // closed by us at the end of the window
	}
	a.mu.Lock()
	a.closedIn = append(a.closedIn, time.Since(sent))
	a.mu.Unlock()
}

func (a *assault) closeAll() {
	a.mu.Lock()
	for _, c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *assault) report() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := slices.Clone(a.closedIn)
	slices.Sort(d)
	stillOpen := len(a.conns) - len(d) - a.refused
	if len(d) == 0 {
		return fmt.Sprintf("none of %d (%d still open at the end of the window, %d cut off while sending)", len(a.conns), stillOpen, a.refused)
	}
	return fmt.Sprintf("%d of %d, median %v, max %v after their last byte; %d cut off while sending, %d still open at the end of the window",
		len(d), len(a.conns), d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond), a.refused, stillOpen)
}

// transportCounters reads the node's refusal and pacing counters from its
// management port, by cause.
func transportCounters(mgmt string) map[string]float64 {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + mgmt + "/metrics")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bankattack: reading the node's counters:", err)
		return nil
	}
	defer resp.Body.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, ok := strings.CutPrefix(sc.Text(), "ffgen_transport_")
		if !ok || !strings.Contains(name, "_total") {
			continue
		}
		name, v, _ := strings.Cut(strings.NewReplacer("refused_total{cause=", "", "\"", "", "}", "", "_total", "").Replace(name), " ")
		n, _ := strconv.ParseFloat(v, 64)
		out[name] = n
	}
	return out
}

// countersSince lists what grew from before to after.
func countersSince(before, after map[string]float64) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		if d := after[name] - before[name]; d > 0 {
			out = append(out, fmt.Sprintf("%s %.0f", name, d))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// waitReady polls the node's /cluster/replicas until every replicated
// service is caught up (/health/ready would also want a member in group b).
func waitReady(mgmt string, bound time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(bound)
	for {
		var reps []runtime.ReplicaStatus
		resp, err := hc.Get("http://" + mgmt + "/cluster/replicas")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&reps)
			resp.Body.Close()
		}
		ready := err == nil && len(reps) > 0
		for _, r := range reps {
			ready = ready && r.Ready
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node's replicas not ready after %s: %v %+v", bound, err, reps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
