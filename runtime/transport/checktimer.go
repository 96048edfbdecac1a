package transport

import "time"

// Two timers check on a connection from time to time: the overrun timer
// (inline.go), whether work the reader runs inline has overrun its grace,
// and the lazy reader timer (callerread.go), whether the read turn has
// stayed free. On a connection that one caller uses call after call, both
// would fire at their base interval for as long as it is used, and each
// firing starts a goroutine, which wakes a second thread, and re-arms the
// timer, which may wake another: a firing every one or two milliseconds
// on each side, a tenth of a sequential call's worth, and beside two CPU
// burners the thread wakes they bring cost such a call about a sixth of
// its latency.
//
// So a timer that finds the connection used since its last check (a turn
// freed, work run inline) checks again twice as late, up to maxCheckBackoff
// times its base interval; one that finds it unused rests, and the next use
// arms it at the base again. What it looks for is seen that much later at
// most, and only after a long run of quick uses: work that overruns its
// 1 ms grace within 16 ms, a turn left free once the calls stop within
// 32 ms rather than 2.
const maxCheckBackoff = 16

// checkInterval is the interval of one such timer.
type checkInterval struct{ base, cur time.Duration }

// start returns the interval of a timer armed from rest.
func (c *checkInterval) start(base time.Duration) time.Duration {
	c.base, c.cur = base, base
	return base
}

// longer returns the interval after a check that found the connection
// used.
func (c *checkInterval) longer() time.Duration {
	c.cur = min(2*c.cur, maxCheckBackoff*c.base)
	return c.cur
}
