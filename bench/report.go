package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Indexes into systems.
const (
	ffgenIdx = iota
	grpcIdx
	netRPCIdx
	rawIdx
)

// median of xs; xs is reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// rounds are the figures of every system of a section in every round:
// [round][system].
type rounds [][]roundResult

// column is one figure of one system across the rounds.
func (rs rounds) column(sys int, f func(roundResult) float64) []float64 {
	out := make([]float64, 0, len(rs))
	for _, rr := range rs {
		out = append(out, f(rr[sys]))
	}
	return out
}

// ratios are the in-round ratios f(a)/f(b).
func (rs rounds) ratios(a, b int, f func(roundResult) float64) []float64 {
	xs := make([]float64, 0, len(rs))
	for _, rr := range rs {
		if d := f(rr[b]); d != 0 {
			xs = append(xs, f(rr[a])/d)
		}
	}
	return xs
}

// ratio is the median of the in-round ratios f(a)/f(b).
func (rs rounds) ratio(a, b int, f func(roundResult) float64) float64 {
	return median(rs.ratios(a, b, f))
}

// within is ratio with both figures from the same system: how ffgen's
// throughput holds from one phase to another.
func (rs rounds) within(sys int, num, den func(roundResult) float64) float64 {
	xs := make([]float64, 0, len(rs))
	for _, rr := range rs {
		if d := den(rr[sys]); d != 0 {
			xs = append(xs, num(rr[sys])/d)
		}
	}
	return median(xs)
}

// failed is how many of a system's calls failed, over every round.
func (rs rounds) failed(sys int) int64 {
	var n int64
	for _, rr := range rs {
		n += rr[sys].failed
	}
	return n
}

// failedOf prints a system's failed calls and the calls it made.
func (rs rounds) failedOf(sys int) string {
	var calls int64
	for _, rr := range rs {
		calls += rr[sys].calls
	}
	return fmt.Sprintf("%d of %d", rs.failed(sys), calls)
}

// medianDur is a cell: the median over the rounds of a duration.
func (rs rounds) medianDur(f func(roundResult) float64) func(int) string {
	return func(i int) string { return fmtDur(time.Duration(median(rs.column(i, f)))) }
}

// medianRate is a cell: the median over the rounds of a rate.
func (rs rounds) medianRate(f func(roundResult) float64) func(int) string {
	return func(i int) string { return fmtRate(median(rs.column(i, f))) }
}

func p50(rr roundResult) float64     { return float64(rr.p50) }
func p90(rr roundResult) float64     { return float64(rr.p90) }
func p99(rr roundResult) float64     { return float64(rr.p99) }
func tput64(rr roundResult) float64  { return rr.tput64 }
func tput256(rr roundResult) float64 { return rr.tput256 }
func allocs(rr roundResult) float64  { return rr.allocsC + rr.allocsS }

func tputInFlight(rr roundResult) float64 { return rr.tput64InFlight }

// A target is one of the goals, checked against a measured figure.
type target struct {
	what     string
	measured float64
	atMost   bool // the figure must be <= limit; else >= limit
	limit    float64
	format   string
}

func (t target) pass() bool {
	if t.atMost {
		return t.measured <= t.limit
	}
	return t.measured >= t.limit
}

// floorRatio is the median of the in-round ratios of raw TCP's p50 to
// the minimal ping-pong's: how far the harness's floor is from the wire's.
func (r *report) floorRatio() float64 { return r.toFloor(rawIdx) }

// toFloor is the median of the in-round ratios of system sys's sequential
// p50 to the minimal ping-pong's.
func (r *report) toFloor(sys int) float64 {
	xs := make([]float64, 0, len(r.rounds))
	for i, rr := range r.rounds {
		if i < len(r.floor) && r.floor[i].p50 > 0 {
			xs = append(xs, float64(rr[sys].p50)/float64(r.floor[i].p50))
		}
	}
	return median(xs)
}

// grpcP50Target is the most ffgen's sequential p50 may be of grpc-go's.
const grpcP50Target = 0.35

// targets are the targets of the sections that ran.
func (r *report) targets() []target {
	var ts []target
	if len(r.rounds) > 0 {
		ts = r.rpcTargets()
	}
	if r.repl != nil {
		ts = append(ts, r.repl.targets()...)
	}
	return ts
}

func (r *report) rpcTargets() []target {
	ts := []target{
		{"sequential p50, raw TCP/minimal ping-pong (the floor is the wire's)", r.floorRatio(), true, 1.5, "%.2f"},
		{"sequential p50, ffgen/raw TCP", r.rounds.ratio(ffgenIdx, rawIdx, p50), true, 2, "%.2f"},
		{"sequential p50, ffgen/grpc-go", r.rounds.ratio(ffgenIdx, grpcIdx, p50), true, grpcP50Target, "%.2f"},
		{"sequential p99, ffgen/raw TCP", r.rounds.ratio(ffgenIdx, rawIdx, p99), true, 3, "%.2f"},
		{"64 callers calls/s, ffgen/grpc-go", r.rounds.ratio(ffgenIdx, grpcIdx, tput64), false, 3, "%.2f"},
		{"64 callers calls/s, ffgen/net-rpc", r.rounds.ratio(ffgenIdx, netRPCIdx, tput64), false, 1.2, "%.2f"},
		{"64 callers calls/s, ffgen/raw TCP", r.rounds.ratio(ffgenIdx, rawIdx, tput64), false, 1, "%.2f"},
		{"256 callers calls/s, ffgen/raw TCP", r.rounds.ratio(ffgenIdx, rawIdx, tput256), false, 1.3, "%.2f"},
		{"allocations per call, client + server", median(r.rounds.column(ffgenIdx, allocs)), true, 10, "%.1f"},
		{"failed calls", float64(r.rounds.failed(ffgenIdx)), true, 0, "%.0f"},
		{"calls/s at 256 callers / at 64", r.rounds.within(ffgenIdx, tput256, tput64), false, 0.9, "%.2f"},
	}
	if r.cfg.inFlight > 0 {
		ts = append(ts, target{fmt.Sprintf("calls/s with %d in flight / without", r.cfg.inFlight),
			r.rounds.within(ffgenIdx, tputInFlight, tput64), false, 0.8, "%.2f"})
	}
	if r.cfg.idleConns > 0 {
		ts = append(ts, target{"server KiB per idle connection", r.idle[ffgenIdx] / 1024, true, 8, "%.1f"})
	}
	return ts
}

func (r *report) allPass() bool {
	for _, t := range r.targets() {
		if !t.pass() {
			return false
		}
	}
	return true
}

// print prints the tables of the sections that ran.
func (r *report) print(w io.Writer) {
	if len(r.rounds) > 0 {
		r.printRPC(w)
	}
	if r.repl != nil {
		if len(r.rounds) > 0 {
			fmt.Fprintln(w)
		}
		r.repl.print(w)
	}
}

func (r *report) printRPC(w io.Writer) {
	// The columns: the systems, then the minimal ping-pong, which has
	// sequential latencies only.
	floor := len(systems)
	names := make([]string, len(systems)+1)
	for i, s := range systems {
		names[i] = s.name
	}
	names[floor] = "minimal ping-pong"
	beside := "nothing else started on the machine"
	if r.cfg.burners > 0 {
		beside = fmt.Sprintf("beside %d CPU burner (processes spinning for the whole run)", r.cfg.burners)
		if r.cfg.burners > 1 {
			beside = strings.Replace(beside, "burner", "burners", 1)
		}
	}
	fmt.Fprintf(w, "%d interleaved rounds; loopback TCP; %d-byte key, %d-byte payload each way; every client and server in a process of its own; %s%s\n\n",
		len(r.rounds), keyLen, payloadLen, beside, pinnedAs(r.cfg.pin))
	table := printTable(w, names)
	// row prints a row of figures the floor has none of.
	row := func(label string, cell func(sys int) string) {
		table(label, func(i int) string {
			if i < floor {
				return cell(i)
			}
			return "-"
		})
	}
	// results returns system i's figures by round, the floor's for i ==
	// floor; column one of the figures.
	results := func(i int) []roundResult {
		if i == floor {
			return r.floor
		}
		out := make([]roundResult, 0, len(r.rounds))
		for _, rr := range r.rounds {
			out = append(out, rr[i])
		}
		return out
	}
	column := func(i int, f func(roundResult) float64) []float64 {
		var out []float64
		for _, rr := range results(i) {
			out = append(out, f(rr))
		}
		return out
	}
	latRow := func(label string, f func(roundResult) float64) {
		table(label, func(i int) string { return fmtDur(time.Duration(median(column(i, f)))) })
	}
	rate := r.rounds.medianRate
	latRow("sequential p50", p50)
	latRow("sequential p90", p90)
	latRow("sequential p99", p99)
	table("sequential p50, fastest–slowest round", func(i int) string {
		xs := column(i, p50)
		return fmt.Sprintf("%.1f–%.1f µs", slices.Min(xs)/1e3, slices.Max(xs)/1e3)
	})
	row(fmt.Sprintf("%d callers, calls/s", callers), rate(tput64))
	row(fmt.Sprintf("%d callers, calls/s", manyCallers), rate(tput256))
	if r.cfg.inFlight > 0 {
		row(fmt.Sprintf("%d callers beside %d in flight, calls/s", callers, r.cfg.inFlight), func(i int) string {
			if i != ffgenIdx {
				return "-"
			}
			return fmtRate(median(r.rounds.column(i, tputInFlight)))
		})
		row(fmt.Sprintf("the same, in the %v right after they started", r.cfg.dur), func(i int) string {
			if i != ffgenIdx {
				return "-"
			}
			return fmtRate(median(r.rounds.column(i, func(rr roundResult) float64 { return rr.tput64Arrived })))
		})
	}
	row("allocations per call, client + server", func(i int) string {
		return fmt.Sprintf("%.1f + %.1f", median(r.rounds.column(i, func(rr roundResult) float64 { return rr.allocsC })),
			median(r.rounds.column(i, func(rr roundResult) float64 { return rr.allocsS })))
	})
	// What a sequential call costs each process, which depends less on
	// the machine's load than its latency does: the floor's column says
	// what the kernel and the Go runtime take of it.
	table("CPU per sequential call, client + server", func(i int) string {
		return fmt.Sprintf("%.1f + %.1f µs", median(column(i, func(rr roundResult) float64 { return rr.cpuC }))/1e3,
			median(column(i, func(rr roundResult) float64 { return rr.cpuS }))/1e3)
	})
	// Which of the two speeds a sequential phase ran at, and why: a
	// call's two threads on one CPU or on two (README.md, Figures).
	table("sequential rounds with client and server on one CPU: p50 there / on two CPUs", func(i int) string {
		var one, two []float64
		for _, rr := range results(i) {
			switch {
			case !rr.placed:
			case rr.oneCPU:
				one = append(one, p50(rr))
			default:
				two = append(two, p50(rr))
			}
		}
		cell := func(xs []float64) string {
			if len(xs) == 0 {
				return "-"
			}
			return fmtDur(time.Duration(median(xs)))
		}
		return fmt.Sprintf("%d of %d: %s / %s", len(one), len(one)+len(two), cell(one), cell(two))
	})
	table("context switches per sequential call, client + server", func(i int) string {
		return fmt.Sprintf("%.2f + %.2f", median(column(i, func(rr roundResult) float64 { return rr.switchC })),
			median(column(i, func(rr roundResult) float64 { return rr.switchS })))
	})
	// What a call costs when many share the client: on a machine whose
	// CPUs are shared, the throughput is what these allow.
	row(fmt.Sprintf("CPU per call at %d callers, client + server", callers), func(i int) string {
		return fmt.Sprintf("%.1f + %.1f µs", median(r.rounds.column(i, func(rr roundResult) float64 { return rr.cpu64C }))/1e3,
			median(r.rounds.column(i, func(rr roundResult) float64 { return rr.cpu64S }))/1e3)
	})
	row(fmt.Sprintf("context switches per call at %d callers, both processes", callers), func(i int) string {
		return fmt.Sprintf("%.2f", median(r.rounds.column(i, func(rr roundResult) float64 { return rr.switch64C })))
	})
	row("failed calls", r.rounds.failedOf)
	if r.cfg.idleConns > 0 {
		row(fmt.Sprintf("server RSS per idle connection (%d)", r.cfg.idleConns), func(i int) string {
			return fmt.Sprintf("%.1f KiB", r.idle[i]/1024)
		})
	}
	fmt.Fprintf(w, "\nBefore each sequential phase the run's processes were left to go idle: %v at most.\n", r.settle.Round(time.Millisecond))
	fmt.Fprintf(w, "\nffgen/grpc-go: p50 %.2f, p99 %.2f, 64-caller throughput %.2f; ffgen/net-rpc: p50 %.2f, throughput %.2f; ffgen/raw: p50 %.2f, p90 %.2f, p99 %.2f, throughput %.2f (64) %.2f (256); raw/ping-pong: p50 %.2f (medians of in-round ratios)\n\n",
		r.rounds.ratio(ffgenIdx, grpcIdx, p50), r.rounds.ratio(ffgenIdx, grpcIdx, p99), r.rounds.ratio(ffgenIdx, grpcIdx, tput64),
		r.rounds.ratio(ffgenIdx, netRPCIdx, p50), r.rounds.ratio(ffgenIdx, netRPCIdx, tput64),
		r.rounds.ratio(ffgenIdx, rawIdx, p50), r.rounds.ratio(ffgenIdx, rawIdx, p90), r.rounds.ratio(ffgenIdx, rawIdx, p99),
		r.rounds.ratio(ffgenIdx, rawIdx, tput64), r.rounds.ratio(ffgenIdx, rawIdx, tput256), r.floorRatio())
	// How far the wire lets the grpc-go target be met: grpc-go's speed
	// moves with the machine's load far more than the wire's does.
	fmt.Fprintf(w, "ffgen/grpc-go p50 ≤ %s asks here for ffgen within %.2f times the minimal ping-pong (grpc-go/ping-pong p50 %.2f; ffgen/ping-pong %.2f)\n\n",
		trimFloat(grpcP50Target), grpcP50Target*r.toFloor(grpcIdx), r.toFloor(grpcIdx), r.toFloor(ffgenIdx))
	printTargets(w, r.rpcTargets())
}

// printTargets prints each target, what was measured and the verdict.
func printTargets(w io.Writer, ts []target) {
	fmt.Fprintln(w, "| target | measured | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range ts {
		op := "≥"
		if t.atMost {
			op = "≤"
		}
		verdict := "PASS"
		if !t.pass() {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "| %s %s %s | "+t.format+" | %s |\n", t.what, op, trimFloat(t.limit), t.measured, verdict)
	}
}

// printTable prints the header of a table with a column per name and
// returns the function that prints a row.
func printTable(w io.Writer, names []string) (row func(label string, cell func(col int) string)) {
	fmt.Fprintf(w, "| | %s |\n", strings.Join(names, " | "))
	fmt.Fprintf(w, "|---%s|\n", strings.Repeat("|---", len(names)))
	return func(label string, cell func(col int) string) {
		cells := make([]string, len(names))
		for i := range names {
			cells[i] = cell(i)
		}
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(cells, " | "))
	}
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

func fmtRate(x float64) string {
	return fmt.Sprintf("%.1fk", x/1000)
}

func trimFloat(x float64) string {
	s := fmt.Sprintf("%.2f", x)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
