//go:build linux

package runtime_test

// The failure detector measured over real processes on loopback: how many
// healthy calls fail over while two CPU burners starve the machine (false
// failovers), and how long a real SIGSTOP of the server takes to fail over,
// at the default heartbeat settings and at 10 ms / 25 ms. A measurement,
// not a test: it runs only when FFGEN_DETECT is set (make detect), prints
// its table, and fails only when it could not measure.
//
//	FFGEN_DETECT=1 go test -run '^TestDetection$' -count=1 -v ./runtime/
//
// FFGEN_DETECT_FOR (default 15s) is the length of each load phase,
// FFGEN_DETECT_CALLERS (16) its concurrent callers, FFGEN_DETECT_STOPS (20)
// the SIGSTOPs per row.
//
// A third table pauses the client instead: a client process runs the same
// healthy calls without burners while it is SIGSTOPped for 1.5 heartbeat
// timeouts about once a second; every failover there is the client blaming
// a server for its own pause.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The load's handler works for the amount it is given, in microseconds;
// an account named stop-* is the SIGSTOP probe: its first attempt says it
// started and waits to be cancelled, later attempts answer at once.
const stopPrefix = "stop-"

// TestDetectionNode is a server process of TestDetection.
func TestDetectionNode(t *testing.T) {
	spec := os.Getenv("FFGEN_DETECT_NODE")
	if spec == "" {
		t.Skip("a server process of TestDetection")
	}
	name, group, _ := strings.Cut(spec, ",")
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: name, Group: group, Logger: testkit.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := runtime.NewServer(runtime.ServerConfig{Logger: testkit.Logger(t)})
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	l := testledger.NewMem(name)
	l.SetHook(func(ctx context.Context, account string, amount int64) error {
		if strings.HasPrefix(account, stopPrefix) {
			if runtime.AttemptFrom(ctx).Number > 0 {
				return nil
			}
			say("started %s", account)
			<-ctx.Done()
			say("ended %s", account)
			return ctx.Err()
		}
		select {
		case <-time.After(time.Duration(amount) * time.Microsecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err := srv.Register(testledger.Desc, l); err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Serve(tp, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	say("listening %s", ln.Addr())
	io.Copy(io.Discard, os.Stdin) // the parent closes it to stop us
	srv.Close()
}

type detectNode struct {
	name, group, addr string
	cmd               *exec.Cmd
	stdin             io.Closer
	lines             chan string
}

func startDetectNode(t *testing.T, name, group string) *detectNode {
	cmd := exec.Command(os.Args[0], "-test.run=^TestDetectionNode$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FFGEN_DETECT_NODE="+name+","+group)
	cmd.SysProcAttr = testkit.Orphanless()
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &detectNode{name: name, group: group, cmd: cmd, stdin: in, lines: make(chan string, 64)}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			n.lines <- sc.Text()
		}
		close(n.lines)
	}()
	line, err := n.expect("listening ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n.addr = strings.TrimPrefix(line, "listening ")
	return n
}

// expect returns the node's next line that starts with prefix.
func (n *detectNode) expect(prefix string, bound time.Duration) (string, error) {
	deadline := time.After(bound)
	for {
		select {
		case line, ok := <-n.lines:
			if !ok {
				return "", fmt.Errorf("%s exited", n.name)
			}
			if strings.HasPrefix(line, prefix) {
				return line, nil
			}
		case <-deadline:
			return "", fmt.Errorf("%s did not say %q within %v", n.name, prefix, bound)
		}
	}
}

// burners starts n processes that spin on the CPU; stop kills them.
func burners(t *testing.T, n int) (stop func()) {
	b, err := testkit.Burn(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return b.Stop
}

type failoverCount struct {
	runtime.NopMetrics
	n       atomic.Int64
	mu      sync.Mutex
	reasons map[runtime.Reason]int
}

func (f *failoverCount) Failover(_, _ string, r runtime.Reason) {
	f.n.Add(1)
	f.mu.Lock()
	f.reasons[r]++
	f.mu.Unlock()
}

// why lists the failovers by reason.
func (f *failoverCount) why() string {
	var out []string
	for r, n := range f.reasons {
		out = append(out, fmt.Sprintf("%s %d", r, n))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func TestDetection(t *testing.T) {
	if os.Getenv("FFGEN_DETECT") == "" {
		t.Skip("a measurement over processes: set FFGEN_DETECT=1 (make detect)")
	}
	loadFor := envDuration(t, "FFGEN_DETECT_FOR", 15*time.Second)
	callers := envInt(t, "FFGEN_DETECT_CALLERS", 16)
	stops := envInt(t, "FFGEN_DETECT_STOPS", 20)

	nodes := []*detectNode{startDetectNode(t, "a1", "a"), startDetectNode(t, "b1", "b")}
	members := runtime.NewStaticMembership()
	var ms []runtime.Member
	for _, n := range nodes {
		ms = append(ms, runtime.Member{Name: n.name, Group: n.group, Addr: n.addr, Services: []string{testledger.Desc.Name}})
	}
	members.Set(ms)

	tuned := testSettings()
	tuned.HeartbeatInterval, tuned.HeartbeatTimeout = 10*time.Millisecond, 25*time.Millisecond
	configs := []struct {
		name string
		s    runtime.Settings
	}{{"defaults", testSettings()}, {"tuned", tuned}}

	var report strings.Builder
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&report, "\nload average before: %s", la)
	}
	fmt.Fprintf(&report, "\nfalse failovers: healthy calls that failed over, %d callers for %v, the handler working 3x the heartbeat timeout, two CPU burners\n", callers, loadFor)
	fmt.Fprintf(&report, "%-9s %-11s %7s %16s %7s\n", "settings", "hb/timeout", "calls", "false failovers", "rate")
	for _, cfg := range configs {
		stop := burners(t, 2)
		calls, fc, errs := falseFailovers(t, members, cfg.s, callers, loadFor)
		stop()
		failovers := fc.n.Load()
		fmt.Fprintf(&report, "%-9s %-11s %7d %16d %6.2f%%", cfg.name, hbLabel(cfg.s), calls, failovers, 100*float64(failovers)/float64(max(calls, 1)))
		if failovers > 0 {
			fmt.Fprintf(&report, "  (%s)", fc.why())
		}
		if errs > 0 {
			fmt.Fprintf(&report, "  (%d calls failed)", errs)
		}
		report.WriteString("\n")
	}
	fmt.Fprintf(&report, "\nSIGSTOP of the server running the call until the call is answered by the other node, %d stops per row\n", stops)
	fmt.Fprintf(&report, "%-9s %-11s %-8s %8s %8s %8s %9s\n", "settings", "hb/timeout", "burners", "p50", "p99", "max", "target")
	for _, busy := range []bool{false, true} {
		for _, cfg := range configs {
			var stop func()
			if busy {
				stop = burners(t, 2)
			}
			ds, failed := stopDetection(t, nodes, members, cfg.s, stops)
			if stop != nil {
				stop()
			}
			slices.Sort(ds)
			fmt.Fprintf(&report, "%-9s %-11s %-8d %8s %8s %8s %9s", cfg.name, hbLabel(cfg.s), map[bool]int{false: 0, true: 2}[busy],
				ms1(quantile(ds, 0.5)), ms1(quantile(ds, 0.99)), ms1(quantile(ds, 1)), ms1(cfg.s.HeartbeatTimeout+20*time.Millisecond))
			if failed > 0 {
				fmt.Fprintf(&report, "  (%d stops not measured)", failed)
			}
			report.WriteString("\n")
		}
	}
	fmt.Fprintf(&report, "\nthe client SIGSTOPped for 1.5 heartbeat timeouts about once a second, %d callers for %v, no burners\n", callers, loadFor)
	fmt.Fprintf(&report, "%-9s %-11s %7s %7s %16s\n", "settings", "hb/timeout", "pauses", "calls", "false failovers")
	for _, cfg := range configs {
		pauses, calls, failovers, why, err := pausedClient(t, ms, cfg.s, callers, loadFor)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&report, "%-9s %-11s %7d %7d %16d", cfg.name, hbLabel(cfg.s), pauses, calls, failovers)
		if why != "" {
			fmt.Fprintf(&report, "  (%s)", why)
		}
		report.WriteString("\n")
	}
	fmt.Print(report.String())
}

// TestDetectionClient is a client process of TestDetection: it runs the
// healthy load against the members in FFGEN_DETECT_CLIENT and prints what
// became of it.
func TestDetectionClient(t *testing.T) {
	spec := os.Getenv("FFGEN_DETECT_CLIENT")
	if spec == "" {
		t.Skip("a client process of TestDetection")
	}
	// interval timeout callers duration name,group,addr...
	f := strings.Fields(spec)
	s := testSettings()
	var err error
	if s.HeartbeatInterval, err = time.ParseDuration(f[0]); err != nil {
		t.Fatal(err)
	}
	if s.HeartbeatTimeout, err = time.ParseDuration(f[1]); err != nil {
		t.Fatal(err)
	}
	callers, _ := strconv.Atoi(f[2])
	d, _ := time.ParseDuration(f[3])
	members := runtime.NewStaticMembership()
	var ms []runtime.Member
	for _, m := range f[4:] {
		p := strings.Split(m, ",")
		ms = append(ms, runtime.Member{Name: p[0], Group: p[1], Addr: p[2], Services: []string{testledger.Desc.Name}})
	}
	members.Set(ms)
	fmt.Println("running")
	calls, fc, errs := falseFailovers(t, members, s, callers, d)
	fmt.Printf("result %d %d %d %s\n", calls, fc.n.Load(), errs, fc.why())
}

// pausedClient runs the load in a client process and SIGSTOPs it for 1.5
// heartbeat timeouts every 0.7 to 1.3 s until it is done.
func pausedClient(t *testing.T, ms []runtime.Member, s runtime.Settings, callers int, d time.Duration) (pauses int, calls, failovers int64, why string, err error) {
	spec := fmt.Sprintf("%v %v %d %v", s.HeartbeatInterval, s.HeartbeatTimeout, callers, d)
	for _, m := range ms {
		spec += fmt.Sprintf(" %s,%s,%s", m.Name, m.Group, m.Addr)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDetectionClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FFGEN_DETECT_CLIENT="+spec)
	cmd.SysProcAttr = testkit.Orphanless()
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, "", err
	}
	defer cmd.Wait()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l := <-lines; l != "running" {
		return 0, 0, 0, "", fmt.Errorf("client process said %q", l)
	}
	pause := s.HeartbeatTimeout * 3 / 2
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return pauses, 0, 0, "", errors.New("client process exited without a result")
			}
			var errs int64
			if _, err := fmt.Sscanf(l, "result %d %d %d", &calls, &failovers, &errs); err != nil {
				return pauses, 0, 0, "", fmt.Errorf("client process said %q", l)
			}
			why = strings.TrimSpace(strings.Join(strings.Fields(l)[4:], " "))
			return pauses, calls, failovers, why, nil
		case <-time.After(700*time.Millisecond + rand.N(600*time.Millisecond)):
			if cmd.Process.Signal(syscall.SIGSTOP) == nil {
				pauses++
				time.Sleep(pause)
				cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	}
}

func hbLabel(s runtime.Settings) string {
	return fmt.Sprintf("%v/%v", s.HeartbeatInterval, s.HeartbeatTimeout)
}

func ms1(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// quantile of sorted ds, the nearest rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func detectClient(t *testing.T, members *runtime.StaticMembership, s runtime.Settings, m runtime.Metrics) *runtime.Client {
	tp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: "client", Group: "clients", Logger: testkit.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := runtime.NewClient(runtime.ClientConfig{Transport: tp, Membership: members, Settings: s, Metrics: m, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// falseFailovers runs healthy calls and counts those that failed over.
func falseFailovers(t *testing.T, members *runtime.StaticMembership, s runtime.Settings, callers int, d time.Duration) (calls int64, fc *failoverCount, errs int64) {
	fc = &failoverCount{reasons: map[runtime.Reason]int{}}
	c := detectClient(t, members, s, fc)
	defer c.Close()
	ledger := testledger.NewClient(c)
	work := int64(3 * s.HeartbeatTimeout / time.Microsecond)
	var n, failed atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i := range callers {
		wg.Go(func() {
			for k := 0; time.Now().Before(end); k++ {
				if _, err := ledger.Add(context.Background(), fmt.Sprintf("load-%d-%d", i, k%64), work); err != nil {
					if failed.Add(1) <= 3 {
						t.Logf("a healthy call failed: %v", err)
					}
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return n.Load(), fc, failed.Load()
}

// stopDetection freezes, stops times, the node that runs a probe call and
// returns how long each call took from the SIGSTOP to its answer.
func stopDetection(t *testing.T, nodes []*detectNode, members *runtime.StaticMembership, s runtime.Settings, stops int) (ds []time.Duration, failed int) {
	// Suspicion would send later probes around a node stopped earlier;
	// this measures one call's detection, so every probe starts fresh.
	s.SuspectFor = 0
	c := detectClient(t, members, s, nil)
	defer c.Close()
	ledger := testledger.NewClient(c)
	for k := range 32 { // connections to both nodes, so the failover does not dial
		if _, err := ledger.Add(context.Background(), fmt.Sprintf("warm-%d", k), 0); err != nil {
			t.Fatal(err)
		}
	}
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	for i := range stops {
		account := stopPrefix + run + "-" + strconv.Itoa(i)
		done := make(chan error, 1)
		var answered time.Time
		go func() {
			_, err := ledger.Add(context.Background(), account, 0)
			answered = time.Now()
			done <- err
		}()
		n, err := startedOn(nodes, account, done, 10*time.Second)
		if err != nil {
			failed++
			t.Logf("probe %s: %v", account, err)
			continue
		}
		// Stop at a random phase of the heartbeat interval.
		time.Sleep(s.HeartbeatInterval + rand.N(s.HeartbeatInterval))
		stopped := time.Now()
		if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		err = <-done
		if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			failed++
			t.Logf("probe %s on %s: %v", account, n.name, err)
		} else {
			ds = append(ds, answered.Sub(stopped))
		}
		// The stopped handler ends on the client's Cancel, once it runs again.
		if _, err := n.expect("ended "+account, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return ds, failed
}

// startedOn waits for the node that starts account's first attempt.
// A call that ends before any node starts it ends the wait.
func startedOn(nodes []*detectNode, account string, done <-chan error, bound time.Duration) (*detectNode, error) {
	deadline := time.After(bound)
	want := "started " + account
	for {
		for _, n := range nodes {
			select {
			case line, ok := <-n.lines:
				if !ok {
					return nil, fmt.Errorf("%s exited", n.name)
				}
				if line == want {
					return n, nil
				}
			case err := <-done:
				return nil, fmt.Errorf("ended before any node started it: %v", err)
			case <-deadline:
				return nil, errors.New(want + ": no node started it")
			case <-time.After(time.Millisecond):
			}
		}
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
