package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// The harness re-executes its own binary as each server and client:
	// here, the test binary.
	if childMain() {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestOneRound runs the whole harness briefly: every system serves and
// answers in its own process, and every figure of the table is measured.
// It asserts no timing: the machine may be busy.
func TestOneRound(t *testing.T) {
	// Each concurrent phase runs long enough for its callers to start and
	// finish a call on a loaded machine: at 50 ms, 256 callers once
	// finished none at a load average of 14.
	// 200 idle connections: with a handful, the server's resident set,
	// read in pages once it stops falling, may not grow at all.
	cfg := config{rpc: true, rounds: 1, seqCalls: 50, dur: 300 * time.Millisecond, idleConns: 200, inFlight: 20, traceDir: t.TempDir()}
	rep, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.rounds) != 1 {
		t.Fatalf("%d rounds measured, want 1", len(rep.rounds))
	}
	for i, s := range systems {
		rr := rep.rounds[0][i]
		if rr.p50 <= 0 || rr.p90 < rr.p50 || rr.p99 < rr.p90 || rr.tput64 <= 0 || rr.tput256 <= 0 {
			t.Errorf("%s: implausible figures %+v", s.name, rr)
		}
		if rr.cpuC <= 0 || rr.cpuS <= 0 {
			t.Errorf("%s: no CPU time measured for the sequential calls: %+v", s.name, rr)
		}
		if !rr.placed {
			t.Errorf("%s: the CPUs the sequential calls ran on were not read: %+v", s.name, rr)
		}
		if rr.cpu64C <= 0 || rr.cpu64S <= 0 {
			t.Errorf("%s: no CPU time measured for the calls at %d callers: %+v", s.name, callers, rr)
		}
		if rep.idle[i] == 0 {
			t.Errorf("%s: no memory measured for idle connections", s.name)
		}
		// -trace: each process traced its sequential phase.
		for _, side := range []string{"client", "server"} {
			name := filepath.Join(cfg.traceDir, fileName(s.name+" "+side)+"-1.trace")
			if st, err := os.Stat(name); err != nil || st.Size() == 0 {
				t.Errorf("%s: no execution trace of the sequential phase: %v", s.name, err)
			}
		}
	}
	if len(rep.floor) != 1 || rep.floor[0].p50 <= 0 || rep.floor[0].cpuC <= 0 || !rep.floor[0].placed {
		t.Errorf("minimal ping-pong: implausible figures %+v", rep.floor)
	}
	if ff := rep.rounds[0][ffgenIdx]; !ff.hasInFlightResult || ff.tput64InFlight <= 0 || ff.tput64Arrived <= 0 {
		t.Errorf("ffgen: no throughput measured beside long operations: %+v", ff)
	}
	var out bytes.Buffer
	rep.print(&out)
	for _, want := range []string{"| sequential p50 |", "| sequential p90 |", "minimal ping-pong", "fastest–slowest round", "| 64 callers, calls/s |", "allocations per call", "CPU per sequential call", "context switches per sequential call", "CPU per call at 64 callers", "per idle connection", "with 20 in flight", "right after they started", "nothing else started on the machine", "asks here for ffgen within", "client and server on one CPU"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "PASS") + strings.Count(out.String(), "FAIL"); n != len(rep.targets()) {
		t.Errorf("%d verdicts for %d targets:\n%s", n, len(rep.targets()), out.String())
	}
}

// TestBesideBurners runs a short round beside a CPU burner the harness
// started itself, and checks that the table says so.
func TestBesideBurners(t *testing.T) {
	rep, err := run(config{rpc: true, rounds: 1, seqCalls: 20, dur: 100 * time.Millisecond, burners: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep.print(&out)
	if want := "beside 1 CPU burner (processes spinning for the whole run)"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
}

// TestPinned runs a short round with the processes pinned (-pin) and
// checks that every system's sequential calls, and the minimal
// ping-pong's, ran where the mode puts them: client and server on one CPU,
// or each on its own. Left to the kernel, most rounds run on one CPU, so
// "two" cannot pass by chance.
func TestPinned(t *testing.T) {
	if err := canPin(); err != nil {
		t.Skip(err)
	}
	for _, mode := range []string{pinOne, pinTwo} {
		t.Run(mode, func(t *testing.T) {
			if err := checkPin(mode); err != nil {
				t.Skip(err)
			}
			rep, err := run(config{rpc: true, rounds: 1, seqCalls: 50, dur: 100 * time.Millisecond, pin: mode})
			if err != nil {
				t.Fatal(err)
			}
			wantOne := mode == pinOne
			for i, s := range systems {
				if rr := rep.rounds[0][i]; !rr.placed || rr.oneCPU != wantOne {
					t.Errorf("%s: client and server on one CPU: %v (told: %v), want %v", s.name, rr.oneCPU, rr.placed, wantOne)
				}
			}
			if rr := rep.floor[0]; !rr.placed || rr.oneCPU != wantOne {
				t.Errorf("minimal ping-pong: client and server on one CPU: %v (told: %v), want %v", rr.oneCPU, rr.placed, wantOne)
			}
			var out bytes.Buffer
			rep.print(&out)
			if want := "(-pin " + mode + ")"; !strings.Contains(out.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, out.String())
			}
		})
	}
	if _, err := run(config{rpc: true, rounds: 1, seqCalls: 50, dur: time.Millisecond, pin: "three"}); err == nil || !strings.Contains(err.Error(), `-pin "three"`) {
		t.Errorf("-pin three: %v, want an error naming it", err)
	}
}

// TestRawIsTheFloor checks that the raw TCP row is the floor the wire
// sets: its sequential p50 within 1.5 times a minimal ping-pong's in the
// same run (the median of three interleaved rounds). It is the harness's
// one timed check, and makes no sense under the race detector, which
// slows the harness's code and the ping-pong's alike but not the kernel's:
// it runs with `go test` here, not in `make test`.
func TestRawIsTheFloor(t *testing.T) {
	if raceEnabled {
		t.Skip("timings under the race detector say nothing of the floor")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	rep, err := run(config{rpc: true, rounds: 3, seqCalls: 2000, dur: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i, rr := range rep.rounds {
		t.Logf("round %d: p50 raw TCP %v, minimal ping-pong %v", i+1, rr[rawIdx].p50, rep.floor[i].p50)
	}
	if ratio := rep.floorRatio(); ratio > 1.5 {
		t.Errorf("raw TCP's sequential p50 is %.2f times the minimal ping-pong's, want at most 1.5: the harness is measured, not the wire", ratio)
	}
}

// TestReplicatedOneRound runs the replicated-write section briefly: ffgen
// on disk, ffgen in memory and three embedded etcd members each serve in
// their own process and are written to from a client process of its own,
// and every figure of the table is measured. It asserts no timing.
func TestReplicatedOneRound(t *testing.T) {
	cfg := config{replicated: true, replRounds: 1, replSeq: 20, dur: 300 * time.Millisecond, replDataDir: t.TempDir()}
	rep, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.rounds) != 0 || rep.repl == nil || len(rep.repl.rounds) != 1 {
		t.Fatalf("want only the replicated section, one round: %+v", rep)
	}
	for i, s := range replSystems {
		rr := rep.repl.rounds[0][i]
		if rr.p50 <= 0 || rr.p99 < rr.p50 || rr.calls < int64(cfg.replSeq) || rr.failed == rr.calls {
			t.Errorf("%s: implausible figures %+v", s.name, rr)
		}
		// No write may finish within the 64 callers' phase on a busy
		// machine under the race detector: a figure, not a failure.
		if rr.tput64 == 0 {
			t.Logf("%s: no write of the 64 callers finished within %v", s.name, cfg.dur)
		}
	}
	// The clusters' data is gone with them.
	if ents, err := os.ReadDir(cfg.replDataDir); err != nil || len(ents) != 0 {
		t.Errorf("data left behind: %v %v", ents, err)
	}
	var out bytes.Buffer
	rep.print(&out)
	for _, want := range []string{"| | ffgen, fsync | ffgen, in memory | etcd 3.", "| sequential p50 |", "| 64 callers, writes/s |", "ffgen, fsync / etcd: p50"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "PASS") + strings.Count(out.String(), "FAIL"); n != len(rep.targets()) {
		t.Errorf("%d verdicts for %d targets:\n%s", n, len(rep.targets()), out.String())
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
