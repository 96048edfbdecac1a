// Package timeouts holds the defaults of a call's timeouts and the rules
// that relate them. The runtime validates settings with them, and ffgen
// validates //ff:timeout with them at generation, without linking the
// runtime into the generator.
package timeouts

import (
	"fmt"
	"time"
)

// Defaults, as in Akka Fast Failover.
const (
	HeartbeatInterval = 90 * time.Millisecond
	HeartbeatTimeout  = 200 * time.Millisecond
	Attempt           = 5 * time.Second
	Operation         = 10 * time.Second
)

// Check returns every rule the timeouts break, each as a sentence that
// names the settings.
func Check(interval, heartbeat, attempt, operation time.Duration) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if interval <= 0 {
		add("HeartbeatInterval (%v) must be positive", interval)
	}
	switch {
	case heartbeat <= 0:
		add("HeartbeatTimeout (%v) must be positive", heartbeat)
	case interval > 0 && heartbeat/2 < interval:
		// Division, not 2*interval: no overflow for huge intervals.
		add("HeartbeatTimeout (%v) must be at least twice HeartbeatInterval (%v)", heartbeat, interval)
	}
	if attempt <= heartbeat {
		add("AttemptTimeout (%v) must be above HeartbeatTimeout (%v)", attempt, heartbeat)
	}
	if operation < attempt {
		add("OperationTimeout (%v) must be at least AttemptTimeout (%v)", operation, attempt)
	}
	return out
}
