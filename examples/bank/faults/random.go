//go:build unix

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
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
// where it does not), a power cut, and an operator who removes a killed
// node from the voters (one kill in four, decided apart from the rest of
// the schedule) and restarts it once it says it is out. The seed is in
// the row's notes, and -seed replays the schedule, though not the
// processes' timing.
func randomFaults(ctx context.Context, e *env) error {
	rng := rand.New(rand.NewPCG(e.suite.Seed, 0x72616e64))
	orng := rand.New(rand.NewPCG(e.suite.Seed, 0x72656d))
	e.note("schedule of seed %d", e.suite.Seed)
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	var removed []*testbed.Node // removed while down, not restarted since they said they are out
	until := e.begin.Add(time.Duration(0.8 * float64(e.suite.Duration)))
	for time.Now().Before(until) && ctx.Err() == nil {
		if err := e.restartOut(&removed); err != nil {
			return err
		}
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
				if orng.IntN(4) == 0 && !slices.Contains(removed, n) {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					if rerr := e.removeReplica(rctx, n.Name); rerr != nil {
						// It may apply all the same, proposed before the
						// leader changed.
						e.note("removal of %s: %v", n.Name, rerr)
					}
					cancel()
					removed = append(removed, n)
				}
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
	// A node removed and started again says it is out, and is restarted;
	// one whose removal never applied serves as the member it was. Once
	// every node serves, the leader has committed what its log holds: no
	// removal is still to come.
	end := time.Now().Add(removedBound)
	for len(removed) > 0 && ctx.Err() == nil {
		if err := e.restartOut(&removed); err != nil {
			return err
		}
		if e.allReady() {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("nodes removed while down neither said they are out nor served within %v", removedBound)
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return ctx.Err()
}

// restartOut restarts the nodes of removed that say they are out, and
// drops them from it.
func (e *env) restartOut(removed *[]*testbed.Node) error {
	if len(*removed) == 0 {
		return nil
	}
	reps, err := replicaStatuses(e)
	if err != nil {
		return err
	}
	for _, n := range slices.Clone(*removed) {
		if r, ok := reps[n.Name]; ok && r.Removed && n.Running() {
			e.note("%s says it is out: %s", n.Name, r.NotReady)
			if err := e.restartRemoved(n); err != nil {
				return err
			}
			*removed = slices.DeleteFunc(*removed, func(x *testbed.Node) bool { return x == n })
		}
	}
	return nil
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
