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

// column is one figure of one system across the rounds.
func (r *report) column(sys int, f func(roundResult) float64) []float64 {
	out := make([]float64, 0, len(r.rounds))
	for _, rr := range r.rounds {
		out = append(out, f(rr[sys]))
	}
	return out
}

// ratio is the median of the in-round ratios f(a)/f(b).
func (r *report) ratio(a, b int, f func(roundResult) float64) float64 {
	xs := make([]float64, 0, len(r.rounds))
	for _, rr := range r.rounds {
		if d := f(rr[b]); d != 0 {
			xs = append(xs, f(rr[a])/d)
		}
	}
	return median(xs)
}

// within is ratio with both figures from the same system: how ffgen's
// throughput holds from one phase to another.
func (r *report) within(sys int, num, den func(roundResult) float64) float64 {
	xs := make([]float64, 0, len(r.rounds))
	for _, rr := range r.rounds {
		if d := den(rr[sys]); d != 0 {
			xs = append(xs, num(rr[sys])/d)
		}
	}
	return median(xs)
}

func p50(rr roundResult) float64     { return float64(rr.p50) }
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

func (r *report) targets() []target {
	ts := []target{
		{"sequential p50, ffgen/grpc-go", r.ratio(ffgenIdx, grpcIdx, p50), true, 0.5, "%.2f"},
		{"sequential p50, ffgen/raw TCP", r.ratio(ffgenIdx, rawIdx, p50), true, 2, "%.2f"},
		{"64 callers calls/s, ffgen/grpc-go", r.ratio(ffgenIdx, grpcIdx, tput64), false, 2, "%.2f"},
		{"64 callers calls/s, ffgen/net-rpc", r.ratio(ffgenIdx, netRPCIdx, tput64), false, 1.2, "%.2f"},
		{"allocations per call, client + server", median(r.column(ffgenIdx, allocs)), true, 10, "%.1f"},
		{"failed calls", float64(r.failed(ffgenIdx)), true, 0, "%.0f"},
		{"calls/s at 256 callers / at 64", r.within(ffgenIdx, tput256, tput64), false, 0.9, "%.2f"},
	}
	if r.cfg.inFlight > 0 {
		ts = append(ts, target{fmt.Sprintf("calls/s with %d in flight / without", r.cfg.inFlight),
			r.within(ffgenIdx, tputInFlight, tput64), false, 0.8, "%.2f"})
	}
	if r.cfg.idleConns > 0 {
		ts = append(ts, target{"server KiB per idle connection", r.idle[ffgenIdx] / 1024, true, 8, "%.1f"})
	}
	return ts
}

func (r *report) failed(sys int) int64 {
	var n int64
	for _, rr := range r.rounds {
		n += rr[sys].failed
	}
	return n
}

func (r *report) allPass() bool {
	for _, t := range r.targets() {
		if !t.pass() {
			return false
		}
	}
	return true
}

func (r *report) print(w io.Writer) {
	names := make([]string, len(systems))
	for i, s := range systems {
		names[i] = s.name
	}
	fmt.Fprintf(w, "%d interleaved rounds; loopback TCP; %d-byte key, %d-byte payload each way; servers in their own processes\n\n",
		len(r.rounds), keyLen, payloadLen)
	fmt.Fprintf(w, "| | %s |\n", strings.Join(names, " | "))
	fmt.Fprintf(w, "|---%s|\n", strings.Repeat("|---", len(systems)))
	row := func(label string, cell func(sys int) string) {
		cells := make([]string, len(systems))
		for i := range systems {
			cells[i] = cell(i)
		}
		fmt.Fprintf(w, "| %s | %s |\n", label, strings.Join(cells, " | "))
	}
	dur := func(f func(roundResult) float64) func(int) string {
		return func(i int) string { return fmtDur(time.Duration(median(r.column(i, f)))) }
	}
	rate := func(f func(roundResult) float64) func(int) string {
		return func(i int) string { return fmtRate(median(r.column(i, f))) }
	}
	row("sequential p50", dur(p50))
	row("sequential p99", dur(p99))
	row(fmt.Sprintf("%d callers, calls/s", callers), rate(tput64))
	row(fmt.Sprintf("%d callers, calls/s", manyCallers), rate(tput256))
	if r.cfg.inFlight > 0 {
		row(fmt.Sprintf("%d callers beside %d in flight, calls/s", callers, r.cfg.inFlight), func(i int) string {
			if i != ffgenIdx {
				return "-"
			}
			return fmtRate(median(r.column(i, tputInFlight)))
		})
		row(fmt.Sprintf("the same, in the %v right after they started", r.cfg.dur), func(i int) string {
			if i != ffgenIdx {
				return "-"
			}
			return fmtRate(median(r.column(i, func(rr roundResult) float64 { return rr.tput64Arrived })))
		})
	}
	row("allocations per call, client + server", func(i int) string {
		return fmt.Sprintf("%.1f + %.1f", median(r.column(i, func(rr roundResult) float64 { return rr.allocsC })),
			median(r.column(i, func(rr roundResult) float64 { return rr.allocsS })))
	})
	row("failed calls", func(i int) string {
		var calls, failed int64
		for _, rr := range r.rounds {
			calls += rr[i].calls
			failed += rr[i].failed
		}
		return fmt.Sprintf("%d of %d", failed, calls)
	})
	if r.cfg.idleConns > 0 {
		row(fmt.Sprintf("server RSS per idle connection (%d)", r.cfg.idleConns), func(i int) string {
			return fmt.Sprintf("%.1f KiB", r.idle[i]/1024)
		})
	}
	fmt.Fprintf(w, "\nffgen/grpc-go: p50 %.2f, p99 %.2f, 64-caller throughput %.2f; ffgen/net-rpc: p50 %.2f, throughput %.2f; ffgen/raw: p50 %.2f, throughput %.2f (medians of in-round ratios)\n\n",
		r.ratio(ffgenIdx, grpcIdx, p50), r.ratio(ffgenIdx, grpcIdx, p99), r.ratio(ffgenIdx, grpcIdx, tput64),
		r.ratio(ffgenIdx, netRPCIdx, p50), r.ratio(ffgenIdx, netRPCIdx, tput64),
		r.ratio(ffgenIdx, rawIdx, p50), r.ratio(ffgenIdx, rawIdx, tput64))
	fmt.Fprintln(w, "| target | measured | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range r.targets() {
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
