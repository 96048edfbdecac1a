package main

import (
	"math"
	"runtime/metrics"

	"github.com/ffgen/ffgen/examples/bank/internal/cli"
)

// schedLatencies is the Go runtime's histogram of how long this process's
// goroutines waited to run once runnable. Taken before and after the
// load, it tells how much of a caller's latency the load generator added
// by itself: a thousand callers in one process wait for its cores too,
// and an answer that arrived waits unread until its caller runs.
const schedLatencies = "/sched/latencies:seconds"

// schedSnapshot reads the histogram.
func schedSnapshot() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedWait is the latency of the goroutines scheduled between the
// snapshots before and after, each bucket counted at its upper bound.
func schedWait(before, after *metrics.Float64Histogram) cli.Latency {
	if before == nil || after == nil || len(before.Counts) != len(after.Counts) {
		return cli.Latency{}
	}
	counts := make([]uint64, len(after.Counts))
	var total uint64
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		total += counts[i]
	}
	if total == 0 {
		return cli.Latency{}
	}
	at := func(q float64) float64 {
		want := uint64(math.Ceil(q * float64(total)))
		var n uint64
		for i, c := range counts {
			if n += c; n >= want {
				return bucketMs(after.Buckets[i+1])
			}
		}
		return bucketMs(after.Buckets[len(after.Buckets)-1])
	}
	l := cli.Latency{Count: int(total), P50: at(0.5), P90: at(0.9), P99: at(0.99)}
	for i := len(counts) - 1; i >= 0; i-- {
		if counts[i] > 0 {
			l.Max = bucketMs(after.Buckets[i+1])
			break
		}
	}
	return l
}

func bucketMs(upper float64) float64 {
	if math.IsInf(upper, 1) {
		return math.Inf(1)
	}
	return upper * 1000
}
