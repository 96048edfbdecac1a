package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/ffgen/ffgen/runtime"
)

// lanWorstMeasured is the LAN preset's longest crash-to-dead time measured
// by BenchmarkCrashToDead on three nodes (docs/cluster.md).
const lanWorstMeasured = 6800 * time.Millisecond

// A client suspects a node it could not reach for SuspectFor; if that ends
// before the membership declares the node dead, routing sends the next
// operations to the dead node again and each pays a failover. The
// defaults must not do that on the LAN preset.
func TestDefaultSuspicionOutlastsDeadDetection(t *testing.T) {
	cfg := DefaultLANConfig()
	mc := cfg.memberlistConfig()
	for _, n := range []int{3, 10} {
		// The fastest memberlist can declare a crash dead: one failed
		// probe, then the suspicion timeout with every confirmation in.
		fastest := mc.ProbeInterval + mc.ProbeTimeout +
			time.Duration(float64(mc.SuspicionMult)*math.Max(1, math.Log10(float64(n)))*float64(mc.ProbeInterval))
		if runtime.DefaultSuspectFor <= fastest {
			t.Errorf("%d nodes: DefaultSuspectFor %v ends before the fastest dead detection, %v", n, runtime.DefaultSuspectFor, fastest)
		}
	}
	if need := lanWorstMeasured + mc.ProbeInterval; runtime.DefaultSuspectFor < need {
		t.Errorf("DefaultSuspectFor %v, want at least the measured worst dead detection %v plus a probe interval (%v)",
			runtime.DefaultSuspectFor, lanWorstMeasured, need)
	}
}
