package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
)

// BenchmarkCrashToDead measures, per preset and cluster size, the time from
// a node's crash (stopped without leaving) until every other node lists it
// as dead: the window the fast-failover client covers. Run it with
// -benchtime=3x; each iteration takes seconds.
func BenchmarkCrashToDead(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cfg   func() Config
		nodes int
	}{
		{"local/3", DefaultLocalConfig, 3},
		{"local/8", DefaultLocalConfig, 8},
		{"lan/3", DefaultLANConfig, 3},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total, worst time.Duration
			for b.Loop() {
				d := crashToDead(b, bc.cfg, bc.nodes)
				total += d
				worst = max(worst, d)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-dead")
			b.ReportMetric(float64(worst.Milliseconds()), "max-ms-to-dead")
		})
	}
}

func crashToDead(b *testing.B, base func() Config, n int) time.Duration {
	b.StopTimer()
	defer b.StartTimer()
	var cs []*Cluster
	defer func() {
		for _, c := range cs {
			c.halt()
		}
	}()
	for i := range n {
		cfg := base()
		cfg.Name, cfg.Group = fmt.Sprintf("n%d", i), fmt.Sprintf("g%d", i)
		cfg.BindAddr, cfg.BindPort = "127.0.0.1", 0
		cfg.JoinRetryMin, cfg.JoinRetryMax = 20*time.Millisecond, 200*time.Millisecond
		if i > 0 {
			cfg.Seeds = []string{cs[0].localAddr()}
		}
		c, err := Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		cs = append(cs, c)
	}
	testkit.Until(b, "every node sees every other", func() bool {
		for _, c := range cs {
			if len(c.Members()) != n {
				return false
			}
		}
		return true
	})
	victim := cs[n-1]
	start := time.Now()
	victim.halt()
	testkit.Until(b, "every other node sees the victim dead", func() bool {
		for _, c := range cs[:n-1] {
			if state(c, victim.cfg.Name) != StateDead {
				return false
			}
		}
		return true
	})
	return time.Since(start)
}
