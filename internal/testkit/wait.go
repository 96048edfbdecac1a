package testkit

import (
	"testing"
	"time"
)

// Bound is how long Until waits: generous, since it only turns a hang
// into a failure, and a loaded machine running the race detector is slow.
// A condition that holds ends the wait at once.
const Bound = time.Minute

// maxStep is the longest pause between two checks of a condition.
const maxStep = 10 * time.Millisecond

// Until waits until cond holds and fails tb if it does not within Bound.
// It is for what nothing signals (a count on another node, a state behind
// a socket): where a channel or a callback says so, wait on that instead.
// cond runs on the caller's goroutine and may fail tb itself. In a
// testing/synctest bubble the checks cost no real time.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if !Within(Bound, cond) {
		tb.Fatalf("%s: not within %v", what, Bound)
	}
}

// Within waits until cond holds or d passes, and reports whether cond
// held: for a test that tries again when a condition is missed.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for step := time.Millisecond; !cond(); step = min(2*step, maxStep) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(step)
	}
	return true
}

// Receive waits for a value from ch, and fails tb if none comes within
// Bound.
func Receive[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Bound):
		tb.Fatalf("%s: not within %v", what, Bound)
		var zero T
		return zero
	}
}
