//go:build unix

package main

import (
	"context"
	"math/rand/v2"
	"os"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// randomFaults is the row of faults nobody wrote down, over real processes:
// a seeded schedule of the other rows' faults, one after another from the
// fault's start until 4/5 of the load, each held for a random time: a
// freeze of any node or of the leader, kill -9 and a restart, a graceful
// restart, a lost disk (one node killed, its data directory deleted and
// started again), a node cut off both ways (where iptables runs; a freeze
// where it does not), a power cut. The seed is in the row's notes, and
// -seed replays the schedule, though not the processes' timing.
func randomFaults(ctx context.Context, e *env) error {
	rng := rand.New(rand.NewPCG(e.suite.Seed, 0x72616e64))
	e.note("schedule of seed %d", e.suite.Seed)
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	until := e.begin.Add(time.Duration(0.8 * float64(e.suite.Duration)))
	for time.Now().Before(until) && ctx.Err() == nil {
		hold := e.bounded(time.Duration(200+rng.Int64N(1800))*time.Millisecond, 0.1)
		n := e.Nodes[rng.IntN(len(e.Nodes))]
		var err error
		switch k := rng.IntN(8); {
		case k == 1:
			if name, _, lerr := leader(ctx, e); lerr == nil {
				n = e.Node(name)
			}
			fallthrough
		case k == 0 || k == 4 && e.fw == nil:
			err = e.freeze(n, hold)
			e.note("froze %s for %v", n.Name, hold.Round(time.Millisecond))
		case k == 2 || k == 3:
			err = e.Kill(n)
			if err == nil {
				e.note("killed %s for %v", n.Name, hold.Round(time.Millisecond))
				sleep(context.WithoutCancel(ctx), hold)
				err = e.restart(n)
			}
		case k == 4:
			err = e.fw.cut(ctx, n, both)
			if err == nil {
				e.note("cut %s off for %v", n.Name, hold.Round(time.Millisecond))
				sleep(context.WithoutCancel(ctx), hold)
				err = e.fw.heal(context.WithoutCancel(ctx))
				e.recover(n)
			}
		case k == 5:
			err = e.powerCut(ctx, hold)
		case k == 6:
			err = e.Terminate(n, 30*time.Second)
			if err == nil {
				e.note("stopped %s (SIGTERM) and started it", n.Name)
				err = e.restart(n)
			}
		case k == 7:
			// One lost disk at a time, while every other node serves: the
			// fault raft is meant to survive.
			if !e.allReady() {
				e.note("no disk lost: not every node was ready")
				break
			}
			err = e.Kill(n)
			if err == nil {
				err = os.RemoveAll(e.DataDir(n))
			}
			if err == nil {
				e.note("killed %s, deleted its data directory and started it", n.Name)
				err = e.restart(n)
			}
		}
		if err != nil {
			return err
		}
		sleep(ctx, time.Duration(rng.Int64N(int64(time.Second))))
	}
	return ctx.Err()
}

// allReady reports whether every node is ready now.
func (e *env) allReady() bool {
	for _, n := range e.Nodes {
		if !e.Ready(n) {
			return false
		}
	}
	return true
}

// freeze SIGSTOPs n for d, and times its catch-up from the SIGCONT.
func (e *env) freeze(n *testbed.Node, d time.Duration) error {
	if err := e.Signal(n, syscall.SIGSTOP); err != nil {
		return err
	}
	sleep(context.WithoutCancel(e.ctx), d) // never leave a node frozen
	if err := e.Signal(n, syscall.SIGCONT); err != nil {
		return err
	}
	e.recover(n)
	return nil
}

// powerCut SIGKILLs every node at once and starts them all after down.
func (e *env) powerCut(ctx context.Context, down time.Duration) error {
	for _, n := range e.Nodes {
		if err := e.Kill(n); err != nil {
			return err
		}
	}
	e.note("every node killed for %v", down.Round(time.Millisecond))
	sleep(ctx, down)
	for _, n := range e.Nodes {
		if err := e.restart(n); err != nil {
			return err
		}
	}
	return nil
}
