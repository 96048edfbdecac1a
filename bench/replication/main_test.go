package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	s, ok := parseLine("BenchmarkReplicatedWrite/callers-64-2   7423   227076 ns/op   0 errors   0 new-terms   4404 ops/s   9935 p50-µs   134664 p99-µs   20128 B/op   303 allocs/op")
	if !ok {
		t.Fatal("not parsed")
	}
	if s.variant != "callers-64" || s.n != 7423 || s.vals["p50-µs"] != 9935 || s.vals["allocs/op"] != 303 || s.vals["ops/s"] != 4404 {
		t.Fatalf("parsed %+v", s)
	}
	for _, line := range []string{
		"BenchmarkReplicatedWriteTCP/sequenced-2   100   1 ns/op",
		"BenchmarkReplicatedWrite/sequential-2   --- FAIL",
		"ok  	github.com/ffgen/ffgen/runtime	29.830s",
	} {
		if _, ok := parseLine(line); ok {
			t.Errorf("parsed %q", line)
		}
	}
}

func TestParseOutputKeepsLogs(t *testing.T) {
	out := `goos: linux
BenchmarkReplicatedWrite/sequential-2   3313   367582 ns/op   277.3 p50-µs
BenchmarkReplicatedWrite/callers-64-2   9945   292363 ns/op   14.00 errors
--- BENCH: BenchmarkReplicatedWrite/callers-64-2
    replication_bench_test.go:74: 14 of 9945 writes failed, the first with: no leader
PASS
`
	samples, logged := parseOutput("new", []byte(out), io.Discard)
	if len(samples) != 2 || samples[1].vals["errors"] != 14 {
		t.Errorf("samples %+v", samples)
	}
	want := "new BenchmarkReplicatedWrite/callers-64-2: replication_bench_test.go:74: 14 of 9945 writes failed, the first with: no leader"
	if len(logged) != 1 || logged[0] != want {
		t.Errorf("logged %q, want %q", logged, want)
	}
}

// TestRatiosPairRuns: a ratio pairs runs of the same round, and the table
// says PASS or FAIL against the targets.
func TestRatiosPairRuns(t *testing.T) {
	var r results
	for round, v := range [][4]float64{{100, 110, 1000, 1100}, {200, 260, 500, 400}, {100, 150, 1000, 1000}} {
		r.add("old", sample{variant: "sequential", round: round, vals: map[string]float64{"p50-µs": v[0]}})
		r.add("new", sample{variant: "sequential", round: round, vals: map[string]float64{"p50-µs": v[1]}})
		r.add("old", sample{variant: "callers-64", round: round, vals: map[string]float64{"ops/s": v[2], "p50-µs": 1}})
		r.add("new", sample{variant: "callers-64", round: round, vals: map[string]float64{"ops/s": v[3], "p50-µs": 1}})
	}
	if got := r.ratio("sequential", "p50-µs"); got != 1.3 {
		t.Errorf("p50 ratio %v, want 1.3 (the median of 1.1, 1.3, 1.5)", got)
	}
	if got := r.ratio("callers-64", "ops/s"); got != 1 {
		t.Errorf("throughput ratio %v, want 1", got)
	}
	var buf bytes.Buffer
	r.print(&buf)
	for _, want := range []string{"| sequential p50, new/old ≤ 1.2 | 1.30 | FAIL |", "| callers-64 writes/s, new/old ≥ 1 | 1.00 | PASS |"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
