// Command bench-replication measures the replication of scatter writes
// against that of a base commit, in one run: BenchmarkReplicatedWrite
// (runtime/replication_bench_test.go: four nodes on loopback TCP, one
// caller, then 64) in this tree and in a temporary git worktree of the
// base, the two interleaved round by round (base, this tree, base, this
// tree...) so that a machine that gets busier mid-run weighs on both
// alike. It prints p50, p99, writes/s and allocations per write of each,
// the ratios this tree/base (medians of the in-round ratios) against the
// targets, and removes the worktree.
//
// The default base, 3349ce7, is the hand-written sequencer that raft
// replaced. A base without the benchmark gets old_bench_test.go.txt, the
// same benchmark adapted to that protocol's API (no voters, no election);
// a base that has it runs its own.
//
// Usage:
//
//	go run ./replication [-base 3349ce7] [-rounds 3] [-count 1] [-benchtime 1s] [-strict]
//
// BASE in the environment sets -base's default. `make bench-replication`
// runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// oldBench is BenchmarkReplicatedWrite for the protocol before raft.
//
//go:embed old_bench_test.go.txt
var oldBench []byte

const (
	benchName = "BenchmarkReplicatedWrite"
	benchFile = "runtime/replication_bench_test.go"
	defBase   = "3349ce7"
)

// Targets: this tree against the base.
const (
	maxP50Ratio  = 1.2 // p50 at most 1.2x the base's
	minTputRatio = 1.0 // 64-caller writes/s at least the base's
)

type config struct {
	base      string
	rounds    int
	count     int
	benchtime string
	strict    bool
}

func main() {
	base := os.Getenv("BASE")
	if base == "" {
		base = defBase
	}
	cfg := config{}
	flag.StringVar(&cfg.base, "base", base, "the commit to compare with (default: $BASE, else "+defBase+")")
	flag.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds")
	flag.IntVar(&cfg.count, "count", 1, "runs of the benchmark per tree and round (go test -count)")
	flag.StringVar(&cfg.benchtime, "benchtime", "1s", "go test -benchtime")
	flag.BoolVar(&cfg.strict, "strict", false, "exit 1 if a target is missed")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run does the whole comparison; the worktree is gone when it returns,
// even when interrupted.
func run(ctx context.Context, cfg config, out, progress io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(progress, "bench-replication:", err)
		return 1
	}
	if cfg.rounds < 1 || cfg.count < 1 {
		return fail(errors.New("need at least one round and a count of at least 1"))
	}
	root, err := git(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return fail(err)
	}
	commit, err := git(ctx, root, "rev-parse", "--verify", cfg.base+"^{commit}")
	if err != nil {
		return fail(fmt.Errorf("base %q: %w", cfg.base, err))
	}
	head, _ := git(ctx, root, "rev-parse", "--short", "HEAD")
	if dirty, _ := git(ctx, root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		head += " with uncommitted changes"
	}
	tmp, err := os.MkdirTemp("", "ffgen-bench-replication-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	baseTree := filepath.Join(tmp, "base")
	fmt.Fprintf(progress, "bench-replication: worktree of %.10s\n", commit)
	if _, err := git(ctx, root, "worktree", "add", "--detach", baseTree, commit); err != nil {
		return fail(err)
	}
	defer func() {
		// A context of its own: removal must happen after an interrupt too.
		if _, err := git(context.Background(), root, "worktree", "remove", "--force", baseTree); err != nil {
			fmt.Fprintln(progress, "bench-replication: removing the worktree:", err)
		}
	}()
	own := "its own " + benchFile
	if _, err := os.Stat(filepath.Join(baseTree, benchFile)); errors.Is(err, os.ErrNotExist) {
		own = "old_bench_test.go.txt"
		if err := os.WriteFile(filepath.Join(baseTree, benchFile), oldBench, 0o644); err != nil {
			return fail(err)
		}
	}
	trees := []tree{
		{name: "old", dir: baseTree, bin: filepath.Join(tmp, "old.test")},
		{name: "new", dir: root, bin: filepath.Join(tmp, "new.test")},
	}
	for _, t := range trees {
		fmt.Fprintf(progress, "bench-replication: building the %s benchmark\n", t.name)
		if err := t.build(ctx); err != nil {
			return fail(err)
		}
	}
	res := results{}
	for round := range cfg.rounds {
		for _, t := range trees {
			fmt.Fprintf(progress, "bench-replication: round %d/%d, %s\n", round+1, cfg.rounds, t.name)
			samples, logged, err := t.bench(ctx, cfg, progress)
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			if err != nil {
				// A failed run is a result: its round has no ratio.
				fmt.Fprintf(progress, "bench-replication: %s, round %d: %v\n", t.name, round+1, err)
				first, _, _ := strings.Cut(err.Error(), "\n")
				res.failed = append(res.failed, fmt.Sprintf("%s, round %d: %s", t.name, round+1, first))
			}
			for _, s := range samples {
				s.round = round
				res.add(t.name, s)
			}
			for _, l := range logged {
				res.logged = append(res.logged, fmt.Sprintf("round %d, %s", round+1, l))
			}
		}
	}
	fmt.Fprintf(out, "\nold: %.10s (%s); new: %s. %d interleaved round(s) of -count %d -benchtime %s; four nodes on loopback TCP, one client; allocations and bytes are the whole process's per write\n\n",
		commit, own, head, cfg.rounds, cfg.count, cfg.benchtime)
	res.print(out)
	if len(res.pairs(variants[0], "p50-µs")) == 0 && len(res.pairs(variants[1], "p50-µs")) == 0 {
		return fail(errors.New("no round measured both trees"))
	}
	if cfg.strict && !res.allPass() {
		return 1
	}
	return 0
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(b)), nil
}

// tree is one of the two source trees and its test binary.
type tree struct {
	name string // "old" or "new"
	dir  string
	bin  string
}

// build compiles the runtime package's tests once, so that rounds measure
// the benchmark and not the compiler.
func (t tree) build(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", t.bin, "./runtime")
	cmd.Dir = t.dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go test -c in the %s tree: %w\n%s", t.name, err, b)
	}
	return nil
}

// bench runs go test -run '^$' -bench BenchmarkReplicatedWrite -benchmem
// -count N in the tree, and returns the results it printed and what the
// benchmark logged (failed writes).
func (t tree) bench(ctx context.Context, cfg config, progress io.Writer) ([]sample, []string, error) {
	cmd := exec.CommandContext(ctx, t.bin, "-test.run", "^$", "-test.bench", "^"+benchName+"$", "-test.benchmem",
		"-test.count", strconv.Itoa(cfg.count), "-test.benchtime", cfg.benchtime)
	cmd.Dir = filepath.Join(t.dir, "runtime") // as go test runs it
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	out, logged := parseOutput(t.name, buf.Bytes(), progress)
	if err != nil {
		return out, logged, fmt.Errorf("%w\n%s", err, lastLines(buf.String(), 20))
	}
	return out, logged, nil
}

// parseOutput reads go test's output: the result lines, and the lines the
// benchmark logged, each prefixed with the tree and the benchmark. It
// echoes both to progress.
func parseOutput(tree string, b []byte, progress io.Writer) ([]sample, []string) {
	var out []sample
	var logged []string
	bench := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if s, ok := parseLine(line); ok {
			fmt.Fprintf(progress, "  %s %s\n", tree, line)
			out = append(out, s)
			continue
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "---" && strings.HasPrefix(f[2], benchName+"/") {
			bench = f[2] // "--- BENCH: BenchmarkReplicatedWrite/callers-64-2"
			continue
		}
		if l := strings.TrimSpace(line); strings.Contains(l, "_test.go:") && line != l {
			fmt.Fprintf(progress, "  %s %s: %s\n", tree, bench, l)
			logged = append(logged, fmt.Sprintf("%s %s: %s", tree, bench, l))
		}
	}
	return out, logged
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// sample is one result line of the benchmark.
type sample struct {
	variant string             // "sequential", "callers-64"
	n       int                // iterations
	vals    map[string]float64 // by unit: "ns/op", "p50-µs", "allocs/op"...
	round   int
}

// parseLine reads a line such as
//
//	BenchmarkReplicatedWrite/sequential-2   3313   367582 ns/op   277.3 p50-µs   386 allocs/op
func parseLine(line string) (sample, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], benchName+"/") {
		return sample{}, false
	}
	name := strings.TrimPrefix(f[0], benchName+"/")
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i] // the GOMAXPROCS suffix
		}
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return sample{}, false
	}
	s := sample{variant: name, n: n, vals: map[string]float64{}}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return sample{}, false
		}
		s.vals[f[i+1]] = v
	}
	return s, true
}

var variants = []string{"sequential", "callers-64"}

// results are the samples by tree and variant.
type results struct {
	samples map[string][]sample // by tree name + "/" + variant
	failed  []string            // runs that did not finish
	logged  []string            // what the benchmarks logged
}

func (r *results) add(tree string, s sample) {
	if r.samples == nil {
		r.samples = map[string][]sample{}
	}
	k := tree + "/" + s.variant
	r.samples[k] = append(r.samples[k], s)
}

// column is one figure of one tree and variant across its runs.
func (r *results) column(tree, variant, unit string) []float64 {
	var out []float64
	for _, s := range r.samples[tree+"/"+variant] {
		if v, ok := s.vals[unit]; ok {
			out = append(out, v)
		}
	}
	return out
}

// pairs are new/old of one figure, run k of a round against run k of the
// same round.
func (r *results) pairs(variant, unit string) []float64 {
	byRound := func(tree string) map[int][]float64 {
		m := map[int][]float64{}
		for _, s := range r.samples[tree+"/"+variant] {
			if v, ok := s.vals[unit]; ok {
				m[s.round] = append(m[s.round], v)
			}
		}
		return m
	}
	olds, news := byRound("old"), byRound("new")
	var out []float64
	for round, o := range olds {
		n := news[round]
		for k := range min(len(o), len(n)) {
			if o[k] != 0 {
				out = append(out, n[k]/o[k])
			}
		}
	}
	return out
}

// ratio is the median of the in-round ratios new/old; NaN without any.
func (r *results) ratio(variant, unit string) float64 {
	xs := r.pairs(variant, unit)
	if len(xs) == 0 {
		return math.NaN()
	}
	return median(xs)
}

// median of xs; xs is reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func sum(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t
}

// A target is a goal for a ratio new/old.
type target struct {
	what     string
	measured float64
	atMost   bool // the ratio must be <= limit; else >= limit
	limit    float64
}

func (t target) pass() bool {
	if t.atMost {
		return t.measured <= t.limit
	}
	return t.measured >= t.limit
}

func (r *results) targets() []target {
	return []target{
		{"sequential p50, new/old", r.ratio("sequential", "p50-µs"), true, maxP50Ratio},
		{"callers-64 p50, new/old", r.ratio("callers-64", "p50-µs"), true, maxP50Ratio},
		{"callers-64 writes/s, new/old", r.ratio("callers-64", "ops/s"), false, minTputRatio},
	}
}

func (r *results) allPass() bool {
	for _, t := range r.targets() {
		if !t.pass() {
			return false
		}
	}
	return true
}

func (r *results) print(w io.Writer) {
	fmt.Fprint(w, "| |")
	for _, v := range variants {
		fmt.Fprintf(w, " %s old | %s new | new/old |", v, v)
	}
	fmt.Fprintf(w, "\n|---%s|\n", strings.Repeat("|---", 3*len(variants)))
	type figure struct {
		label, unit string
		cell        func(float64) string
		total       bool // errors and terms: the sum of every run, no ratio
	}
	figures := []figure{
		{"p50", "p50-µs", fmtMicros, false},
		{"p99", "p99-µs", fmtMicros, false},
		{"writes/s", "ops/s", count, false},
		{"allocs/write", "allocs/op", count, false},
		{"bytes/write", "B/op", count, false},
		{"attempts/write", "attempts/write", func(x float64) string { return fmt.Sprintf("%.3f", x) }, false},
		{"failed writes (all runs)", "errors", count, true},
		{"client failovers (all runs)", "failovers", count, true},
		{"new terms while writing (all runs)", "new-terms", count, true},
	}
	for _, f := range figures {
		fmt.Fprintf(w, "| %s |", f.label)
		for _, v := range variants {
			for _, tr := range []string{"old", "new"} {
				col := r.column(tr, v, f.unit)
				switch {
				case len(col) == 0:
					fmt.Fprint(w, " - |")
				case f.total:
					fmt.Fprintf(w, " %s |", f.cell(sum(col)))
				default:
					fmt.Fprintf(w, " %s |", f.cell(median(col)))
				}
			}
			if f.total {
				fmt.Fprint(w, " |")
			} else {
				fmt.Fprintf(w, " %s |", fmtRatio(r.ratio(v, f.unit)))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nFigures are medians over the runs; new/old is the median of the in-round ratios.")
	fmt.Fprintln(w, "\n| target | measured | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range r.targets() {
		op, verdict := "≥", "PASS"
		if t.atMost {
			op = "≤"
		}
		if !t.pass() {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "| %s %s %s | %s | %s |\n", t.what, op, strconv.FormatFloat(t.limit, 'f', -1, 64), fmtRatio(t.measured), verdict)
	}
	if len(r.logged) > 0 {
		fmt.Fprintln(w, "\nLogged by the benchmark:")
		for _, l := range r.logged {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	for _, f := range r.failed {
		fmt.Fprintf(w, "\nfailed run: %s\n", f)
	}
}

func fmtMicros(x float64) string { return fmt.Sprintf("%.0f µs", x) }

func count(x float64) string { return fmt.Sprintf("%.0f", x) }

func fmtRatio(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}
