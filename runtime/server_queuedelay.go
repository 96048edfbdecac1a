package runtime

import (
	"fmt"
	"time"
)

// Queueing delay. A bound on how many operations wait to start
// (ServerConfig.MaxQueued) is a bound on their wait only at one rate of
// work: on a node that a host's other work slows to a fraction of its
// capacity, 64 operations waiting are 64 times the time each takes to get
// through, and every call the node takes on pays it. So a node also
// watches how long the operations it took on waited to start, as CoDel
// watches a queue's sojourn times and Facebook's servers their queues'
// delay: a wait that every operation starting in an interval paid, the
// least of them over ServerConfig.QueueDelay beyond the node's unloaded
// wait, is a standing queue, not a burst (a burst leaves some operation
// a short wait). While one stands, the node takes on only as many
// waiting operations as it starts in the unloaded wait plus the target,
// by Little's law the number that waits that long, and refuses the rest
// at arrival as it refuses past MaxQueued. The clients' limits fall on
// the refusals, and the wait of what the node takes on stays near the
// target whatever the rate the host leaves it.

// DefaultQueueDelay is the default ServerConfig.QueueDelay, CoDel's target
// and the queue timeout of Facebook's servers under load: well above
// what scheduling adds to a wait on a busy host, well under the
// latency a caller notices.
const DefaultQueueDelay = 5 * time.Millisecond

const (
	// queueDelayInterval is how long every starting operation must have
	// waited for a standing queue: CoDel's interval, long enough that a
	// burst drains within it.
	queueDelayInterval = 100 * time.Millisecond
	// queueDelayFloorIntervals is how many intervals the unloaded wait is
	// the least of (a minute): the time a replicated write or a
	// linearizable read waits for the log even on an idle node, which
	// is no queue. A node loaded for longer than that takes its wait
	// then as the unloaded one, as a latency baseline rides slow drift.
	queueDelayFloorIntervals = 600
)

// delayWatch is what a server knows of how long the operations it took on
// waited to start: the operations with a caller waiting (not the copies of
// replicated writes a follower applies, nor hold operations, which wait
// aside on purpose). s.mu guards it.
type delayWatch struct {
	target time.Duration // ServerConfig.QueueDelay; <= 0: not watched

	// The current interval.
	end    time.Time     // it ends here
	least  time.Duration // the least wait of an operation that started in it
	starts int           // operations that started in it

	// The last interval that ended, or a quiet spell after it.
	standing bool          // its least wait exceeded floor + target
	allowed  int           // while standing: the operations that may wait
	last     time.Duration // its least wait

	// lows are the least waits of the last intervals that had starts,
	// a ring; floor is the least of them, the unloaded wait.
	lows  [queueDelayFloorIntervals]time.Duration
	nlows int
	ilow  int
	floor time.Duration
}

// started records that an operation that waited wait started at now.
func (d *delayWatch) started(now time.Time, wait time.Duration) {
	if d.target <= 0 {
		return
	}
	d.roll(now)
	if d.starts == 0 || wait < d.least {
		d.least = wait
	}
	d.starts++
}

// roll ends the current interval if now is past it, judging it. An
// interval with no start, or one that ended a while before now (no
// operation started since), leaves no standing queue: the waiting bound
// (MaxQueued) covers a node where nothing starts at all.
func (d *delayWatch) roll(now time.Time) {
	if now.Before(d.end) {
		return
	}
	if d.starts > 0 && now.Before(d.end.Add(queueDelayInterval)) {
		d.judge()
	} else {
		d.standing = false
	}
	d.starts = 0
	d.end = now.Add(queueDelayInterval)
}

// judge ends an interval that had starts.
func (d *delayWatch) judge() {
	d.lows[d.ilow] = d.least
	d.ilow = (d.ilow + 1) % len(d.lows)
	d.nlows = min(d.nlows+1, len(d.lows))
	d.floor = d.least
	for _, l := range d.lows[:d.nlows] {
		d.floor = min(d.floor, l)
	}
	d.last = d.least
	d.standing = d.least > d.floor+d.target
	rate := float64(d.starts) / queueDelayInterval.Seconds()
	d.allowed = max(1, int(rate*(d.floor+d.target).Seconds()))
}

// refusal says why an attempt arriving at now, with waiting operations
// waiting to start, is refused for the queue's delay; "" takes it on.
func (d *delayWatch) refusal(now time.Time, waiting int) string {
	if d.target <= 0 {
		return ""
	}
	d.roll(now)
	if !d.standing || waiting < d.allowed {
		return ""
	}
	return fmt.Sprintf("every operation that started in the last %v waited %v or more to start, over %v (ServerConfig.QueueDelay) beyond the unloaded %v; %d waiting, %d taken on while the queue stands",
		queueDelayInterval, d.last.Round(time.Microsecond), d.target, d.floor.Round(time.Microsecond), waiting, d.allowed)
}
