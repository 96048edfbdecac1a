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

// What every operation waits on an idle node (for the replicated log, a
// round trip away) is not a queue: only a wait beyond it by more than the
// target is, and while it stands the node takes on as many waiting
// operations as it starts in the unloaded wait plus the target.
func TestQueueDelayFromTheUnloadedWait(t *testing.T) {
	d := &delayWatch{target: 5 * time.Millisecond}
	now := time.Unix(1000, 0)
	// One start a millisecond, each after 20 ms for the log.
	now = feed(d, now, time.Second, time.Millisecond, 20*time.Millisecond)
	if why := d.refusal(now, 100); why != "" {
		t.Fatalf("every operation waits 20 ms, as on an idle node: refused (%s)", why)
	}
	if d.floor != 20*time.Millisecond {
		t.Errorf("unloaded wait %v, want 20ms", d.floor)
	}
	// Then each waits 40 ms: a queue stands after an interval.
	now = feed(d, now, 200*time.Millisecond, time.Millisecond, 40*time.Millisecond)
	if why := d.refusal(now, 24); why != "" {
		t.Errorf("24 waiting, fewer than the 25 the node starts in 25 ms: refused (%s)", why)
	}
	if why := d.refusal(now, 25); !strings.Contains(why, "QueueDelay") {
		t.Errorf("25 waiting while a queue stands: %q, want a refusal naming QueueDelay", why)
	}
	// An interval in which one operation waited no more than the
	// target beyond the unloaded wait ends the standing queue.
	d.started(now, 21*time.Millisecond)
	now = feed(d, now.Add(time.Millisecond), 99*time.Millisecond, time.Millisecond, 40*time.Millisecond)
	if why := d.refusal(now, 100); why != "" {
		t.Errorf("after an interval with a wait of 21 ms: refused (%s)", why)
	}
	now = feed(d, now, 100*time.Millisecond, time.Millisecond, 40*time.Millisecond)
	if why := d.refusal(now, 100); why == "" {
		t.Errorf("after another interval of 40 ms waits: taken on, want refused")
	}
	// So does a spell in which nothing started.
	if why := d.refusal(now.Add(time.Second), 100); why != "" {
		t.Errorf("after a second with no start: refused (%s)", why)
	}
}
