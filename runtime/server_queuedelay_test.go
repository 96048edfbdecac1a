package runtime

import (
	"strings"
	"testing"
	"time"
)

// feed records a start every gap from at until at+d, each having waited
// wait, and returns the time after.
func feed(d *delayWatch, at time.Time, span, gap, wait time.Duration) time.Time {
	for end := at.Add(span); at.Before(end); at = at.Add(gap) {
		d.started(at, wait)
	}
	return at
}

// What every operation waits on an idle node is not a queue: only a
// median wait beyond it by more than the target is, and while such a
// queue stands the node takes on as many waiting operations as it starts
// in the unloaded wait plus the target.
func TestQueueDelayFromTheUnloadedWait(t *testing.T) {
	d := &delayWatch{target: 5 * time.Millisecond}
	now := time.Unix(1000, 0)
	// One start a millisecond, each after 2 ms (a log nearby).
	now = feed(d, now, time.Second, time.Millisecond, 2*time.Millisecond)
	if why := d.refusal(now, 100); why != "" {
		t.Fatalf("every operation waits 2 ms, as on an idle node: refused (%s)", why)
	}
	if d.floor < 1750*time.Microsecond || d.floor > 2250*time.Microsecond {
		t.Errorf("unloaded wait %v, want 2ms within an eighth", d.floor)
	}
	// Then each waits 6 ms: within the target.
	now = feed(d, now, 200*time.Millisecond, time.Millisecond, 6*time.Millisecond)
	if why := d.refusal(now, 100); why != "" {
		t.Errorf("waits of 6 ms, within 5 ms of the unloaded 2 ms: refused (%s)", why)
	}
	// Then 10 ms: a queue stands after an interval. The node starts
	// 1000 a second: 7 in 7 ms.
	now = feed(d, now, 200*time.Millisecond, time.Millisecond, 10*time.Millisecond)
	if why := d.refusal(now, 5); why != "" {
		t.Errorf("5 waiting, fewer than the node starts in 7 ms: refused (%s)", why)
	}
	if why := d.refusal(now, 8); !strings.Contains(why, "QueueDelay") {
		t.Errorf("8 waiting while a queue stands: %q, want a refusal naming QueueDelay", why)
	}
	// An interval of few starts, a stall of the host, does not lower
	// the bound: it is set by the greatest rate of the last second.
	now = feed(d, now, 100*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond)
	if why := d.refusal(now, 5); why != "" {
		t.Errorf("5 waiting after an interval of 10 starts: refused (%s)", why)
	}
	// An interval in which half the operations waited no more than the
	// target beyond the unloaded wait ends the standing queue, however
	// long the others waited (a stall of the host).
	now = feed(d, now, 100*time.Millisecond, 2*time.Millisecond, 3*time.Millisecond)
	feed(d, now.Add(-99*time.Millisecond), 100*time.Millisecond, 2*time.Millisecond, 200*time.Millisecond)
	if why := d.refusal(now, 100); why != "" {
		t.Errorf("after an interval with a median wait of 3 ms: refused (%s)", why)
	}
	now = feed(d, now, 100*time.Millisecond, time.Millisecond, 10*time.Millisecond)
	if why := d.refusal(now, 100); why == "" {
		t.Errorf("after another interval of 10 ms waits: taken on, want refused")
	}
	// So does a spell in which nothing started.
	if why := d.refusal(now.Add(time.Second), 100); why != "" {
		t.Errorf("after a second with no start: refused (%s)", why)
	}
}

// feedSpread is feed with waits spread evenly over [lo, hi), as the log
// serves them in batches: an operation that joins a batch just before it
// is sent waits one round, one that just missed it waits for the next.
func feedSpread(d *delayWatch, at time.Time, span, gap, lo, hi time.Duration) time.Time {
	step := (hi - lo) / 20
	for i, end := 0, at.Add(span); at.Before(end); i, at = i+1, at.Add(gap) {
		d.started(at, lo+time.Duration(i%20)*step)
	}
	return at
}

// A node that boots into load never sees an idle interval: its unloaded
// wait is what the quickest tenth of its operations waited, about one
// round of the log, not the median of a loaded interval, which holds
// the queue it is there to find. With the median, nodes that started
// under 1,024 callers took 4 to 7 ms for their unloaded wait, let twice
// that stand, and every call paid it.
func TestQueueDelayOfANodeThatBootsIntoLoad(t *testing.T) {
	d := &delayWatch{target: 5 * time.Millisecond}
	now := time.Unix(1000, 0)
	// Waits from 1 to 9 ms, the median 5 ms: within the target of a
	// round of 1 ms.
	now = feedSpread(d, now, time.Second, 100*time.Microsecond, time.Millisecond, 9*time.Millisecond)
	if d.floor < 875*time.Microsecond || d.floor > 1500*time.Microsecond {
		t.Errorf("unloaded wait %v, want about the quickest tenth's, 1 to 1.4 ms", d.floor)
	}
	if why := d.refusal(now, 100); why != "" {
		t.Errorf("a median wait of 5 ms, within 5 ms of a 1 ms round: refused (%s)", why)
	}
	// Waits from 4 to 12 ms: a queue of 7 ms stands.
	now = feedSpread(d, now, 200*time.Millisecond, 100*time.Microsecond, 4*time.Millisecond, 12*time.Millisecond)
	if why := d.refusal(now, 100); why == "" {
		t.Error("a median wait of 8 ms, 7 ms over a 1 ms round: taken on, want refused")
	}
}

// A node whose operations wait long unloaded (on a disk, a distant peer)
// lets a queue as long as that wait stand, not only the target: its log
// serves what waits in rounds of that length, and a load it serves in two
// is no queue to refuse.
func TestQueueDelayOfASlowLog(t *testing.T) {
	d := &delayWatch{target: 5 * time.Millisecond}
	now := time.Unix(1000, 0)
	now = feed(d, now, time.Second, time.Millisecond, 20*time.Millisecond)
	now = feed(d, now, 200*time.Millisecond, time.Millisecond, 35*time.Millisecond)
	if why := d.refusal(now, 100); why != "" {
		t.Errorf("waits of 35 ms, within 20 ms of the unloaded 20 ms: refused (%s)", why)
	}
	now = feed(d, now, 200*time.Millisecond, time.Millisecond, 50*time.Millisecond)
	if why := d.refusal(now, 100); why == "" {
		t.Errorf("waits of 50 ms, past twice the unloaded 20 ms: taken on, want refused")
	}
}

// The buckets of the waits are ordered, contiguous, and within an eighth.
func TestWaitBuckets(t *testing.T) {
	for i := range waitBuckets - 1 {
		lo, hi := waitLow(i), waitLow(i+1)
		if hi <= lo {
			t.Fatalf("bucket %d: [%v, %v)", i, lo, hi)
		}
		for _, d := range []time.Duration{lo, hi - time.Microsecond} {
			if b := waitBucket(d); b != i {
				t.Errorf("waitBucket(%v) = %d, want %d", d, b, i)
			}
		}
		if i >= 8 && float64(hi-lo) > float64(lo)/4+float64(time.Microsecond) {
			t.Errorf("bucket %d: [%v, %v) wider than a quarter", i, lo, hi)
		}
	}
	if b := waitBucket(time.Hour); b != waitBuckets-1 {
		t.Errorf("waitBucket(1h) = %d, want the last", b)
	}
}
