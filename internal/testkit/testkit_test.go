package testkit

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// failures records what a test would have failed with.
type failures struct {
	testing.TB
	errs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

// An engine bug fails the test; anything else is discarded.
func TestLoggerFailsOnBugsAlone(t *testing.T) {
	f := &failures{TB: t}
	log := Logger(f).With("node", "a1")
	log.Error("ffgen: handler panicked", "err", "boom")
	log.Warn("ffgen: bug: at a level below error is no record at all")
	if len(f.errs) != 0 {
		t.Fatalf("failed on records that are no bug: %q", f.errs)
	}
	log.Error("ffgen: bug: impossible execution event; state kept", "event", "start", "state", "expired")
	if want := "ffgen: bug: impossible execution event; state kept event=start state=expired"; len(f.errs) != 1 || f.errs[0] != want {
		t.Errorf("failures %q, want [%q]", f.errs, want)
	}
}

func TestWithinReportsWhetherTheConditionHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Within(time.Second, func() bool { return time.Since(start) >= 300*time.Millisecond }) {
			t.Error("a condition that came to hold within the bound was missed")
		}
		if took := time.Since(start); took > 310*time.Millisecond {
			t.Errorf("Within returned %v after the condition held at 300ms", took)
		}
		start = time.Now()
		if Within(time.Second, func() bool { return false }) {
			t.Error("a condition that never held was reported held")
		}
		if took := time.Since(start); took < time.Second {
			t.Errorf("gave up after %v, before the bound", took)
		}
	})
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports := FreePorts(t, 4)
	seen := map[int]bool{}
	for _, p := range ports {
		if p == 0 || seen[p] {
			t.Fatalf("ports %v: want 4 distinct", ports)
		}
		seen[p] = true
	}
}
