package runtime

import (
	"fmt"
	"math/bits"
	"slices"
	"time"
)

// Queueing delay. A bound on how many operations wait to start
// (ServerConfig.MaxQueued) bounds their wait only at one rate of work: on
// a node that a host's other work slows to a fraction of its capacity, 64
// operations waiting are 64 times the time each takes to get through, and
// every call the node takes on pays it. So a node also watches how long
// the operations it took on waited to start, as CoDel watches a queue's
// sojourn times and Facebook's servers the delay of their queues, and
// bounds that. When the median wait of an interval exceeds the node's
// unloaded one (what a replicated write or a linearizable read waits for
// the log on an idle node, which is no queue: the least, over the last
// minute, of what the quickest tenth of an interval's operations waited)
// by ServerConfig.QueueDelay (or by the unloaded wait, if
// longer: limit), a queue stands, and the node takes on only as many
// waiting operations as it starts in that median (by Little's law, the
// number that waits that long; at the greatest rate of the last second), and refuses the rest at arrival as it refuses past MaxQueued,
// until an interval's median is back under it. The rate is measured as
// the node works, so the bound follows what the host leaves it; the
// clients' limits fall on the refusals.
//
// The median, not CoDel's least wait: the replicated log serves its
// waiting writes and reads in batches, one per round of raft, so some
// operation of each batch waits little however many wait for the next
// one, and the least wait never shows that queue. Nor the average: a
// stall of the host of a few tens of milliseconds, which every operation
// waiting then pays, raises an interval's average past the target with
// no queue standing, and half of the interval's operations must wait
// long for its median to.

// SuggestedQueueDelay is a ServerConfig.QueueDelay (off by default):
// CoDel's target and the queue timeout of Facebook's servers under load,
// well above what scheduling adds to a wait on a busy host, well under
// the latency a caller notices.
const SuggestedQueueDelay = 5 * time.Millisecond

const (
	// queueDelayInterval is the span of the waits judged together
	// (CoDel's interval): long enough for many, short enough that a
	// queue is caught before it costs a caller much.
	queueDelayInterval = 100 * time.Millisecond
	// queueDelayRateIntervals is how many intervals the rate that sets
	// the bound is the greatest of (a second): what the node showed it
	// starts, not what one stall of the host left it.
	queueDelayRateIntervals = 10
	// queueDelayFloorIntervals is how many intervals the unloaded wait is
	// the least of (a minute). A node loaded for longer than that takes
	// its wait then for the unloaded one, as a latency baseline rides
	// slow drift.
	queueDelayFloorIntervals = 600
)

// delayWatch is what a server knows of how long the operations it took on
// waited to start: the operations with a caller waiting (not the copies of
// replicated writes a follower applies, nor hold operations, which wait
// aside on purpose). s.mu guards it.
type delayWatch struct {
	target time.Duration // ServerConfig.QueueDelay; <= 0: not watched

	// The current interval.
	end    time.Time           // it ends here
	waits  [waitBuckets]uint32 // the waits of the operations that started in it
	starts int

	// The last interval that ended, unless nothing started since.
	standing bool          // its median wait exceeded limit()
	allowed  int           // while standing: the operations that may wait
	last     time.Duration // its median wait; 0 after a quiet spell

	// lows are the waits of the quickest tenth of the last intervals
	// that had starts, a ring; floor is the least of them, the unloaded
	// wait. Not their medians: a node that boots into load has no idle
	// interval, and a loaded interval's median holds the queue (nodes
	// started under 1,024 callers took 4 to 7 ms for their unloaded wait,
	// their log's round being under 1 ms, and let twice that stand).
	// The quickest tenth of even a loaded interval joined a batch of the
	// log just before it was sent: a round, as on an idle node.
	lows  [queueDelayFloorIntervals]time.Duration
	nlows int
	ilow  int
	floor time.Duration

	// rates are the starts of the last intervals, a ring.
	rates [queueDelayRateIntervals]int
	irate int
}

// started records that an operation that waited wait started at now.
func (d *delayWatch) started(now time.Time, wait time.Duration) {
	if d.target <= 0 {
		return
	}
	d.roll(now)
	d.waits[waitBucket(wait)]++
	d.starts++
}

// roll ends the current interval if now is past it, judging it. An
// interval with no start, or one that ended a while before now (no
// operation started since), leaves no queue standing: the waiting bound
// (MaxQueued) covers a node where nothing starts at all.
func (d *delayWatch) roll(now time.Time) {
	if now.Before(d.end) {
		return
	}
	if d.starts > 0 && now.Before(d.end.Add(queueDelayInterval)) {
		d.judge()
	} else {
		d.standing, d.last = false, 0
		d.rates = [queueDelayRateIntervals]int{}
	}
	if d.starts > 0 {
		d.waits = [waitBuckets]uint32{}
		d.starts = 0
	}
	d.end = now.Add(queueDelayInterval)
}

// judge ends an interval that had starts.
func (d *delayWatch) judge() {
	d.last = d.quantile(2)
	d.lows[d.ilow] = d.quantile(10)
	d.ilow = (d.ilow + 1) % len(d.lows)
	d.nlows = min(d.nlows+1, len(d.lows))
	d.floor = d.last
	for _, l := range d.lows[:d.nlows] {
		d.floor = min(d.floor, l)
	}
	d.standing = d.last > d.limit()
	d.rates[d.irate] = d.starts
	d.irate = (d.irate + 1) % len(d.rates)
	rate := float64(slices.Max(d.rates[:])) / queueDelayInterval.Seconds()
	d.allowed = max(1, int(rate*d.limit().Seconds()))
}

// quantile is the wait of the current interval, which had starts, that
// one in every n waited less than, within an eighth: n = 2, the median.
func (d *delayWatch) quantile(n int) time.Duration {
	k := 0
	for i, c := range d.waits {
		if k += int(c); n*k >= d.starts {
			return (waitLow(i) + waitLow(i+1)) / 2
		}
	}
	return waitLow(waitBuckets)
}

// The waits of an interval are counted in buckets, exact to 8 µs and
// four to each doubling above, to 60 s and more.
const waitBuckets = 100

func waitBucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < 8 {
		return int(us)
	}
	n := bits.Len64(us)
	return min(4*n+int(us>>(n-3)&3)-8, waitBuckets-1)
}

// waitLow is the least wait of bucket i.
func waitLow(i int) time.Duration {
	if i < 8 {
		return time.Duration(i) * time.Microsecond
	}
	n, sub := (i+8)/4, (i+8)%4
	return time.Duration((4+sub)<<(n-3)) * time.Microsecond
}

// refusal says why an attempt arriving at now, with waiting operations
// waiting to start, is refused for their delay; "" takes it on.
func (d *delayWatch) refusal(now time.Time, waiting int) string {
	if d.target <= 0 {
		return ""
	}
	d.roll(now)
	if !d.standing || waiting < d.allowed {
		return ""
	}
	return fmt.Sprintf("half the operations that started in the last %v waited %v or more to start, the unloaded %v plus over %v (ServerConfig.QueueDelay, or the unloaded wait if longer); %d wait, as many as start in %v",
		queueDelayInterval, d.last.Round(time.Microsecond), d.floor.Round(time.Microsecond), max(d.target, d.floor).Round(time.Microsecond), waiting, d.limit().Round(time.Microsecond))
}

// queueDelay returns the median wait to start of the last interval and
// the median past which the node refuses work (0, 0: not watched).
func (d *delayWatch) queueDelay(now time.Time) (wait, limit time.Duration) {
	if d.target <= 0 {
		return 0, 0
	}
	d.roll(now)
	return d.last, d.limit()
}

// limit is the median wait past which a queue stands: the unloaded wait,
// and as long again, or the target if that is longer. A queue of the
// target is what a node whose operations wait little unloaded lets
// stand; one whose operations wait on a disk or a distant peer lets one
// as long as that wait stand, or it would refuse a load its log serves
// in two rounds.
func (d *delayWatch) limit() time.Duration { return d.floor + max(d.target, d.floor) }
