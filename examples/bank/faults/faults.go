//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
	"github.com/ffgen/ffgen/runtime"
)

// Timings of the faults, as fractions of the load's duration so that the
// short version keeps their shape. A fault's own length is capped by what
// the load leaves.
const (
	faultAt   = 0.2 // most faults start a fifth into the load
	downFor   = 3 * time.Second
	freezeFor = 10 * time.Second
	cutFor    = 8 * time.Second
	// healBound is how soon after a partition heals every node must be
	// ready again: raft's next heartbeat, over a connection redialed at
	// most a second apart, and the log it missed. Before the leader kept
	// sending to voters the membership listed dead, and peer connections
	// closed what stayed unacknowledged, it took 5 to 16 s.
	healBound = 3 * time.Second
)

// bounded caps d at frac of the load.
func (e *env) bounded(d time.Duration, frac float64) time.Duration {
	return min(d, time.Duration(frac*float64(e.suite.Duration)))
}

func (e *env) start() time.Duration { return time.Duration(faultAt * float64(e.suite.Duration)) }

// faults is the suite, in the order it runs.
var faults = []fault{
	{name: "none", about: "no fault: the baseline", run: func(ctx context.Context, e *env) error { return nil }},
	{name: "kill9-restart", about: "SIGKILL b2, start it again", run: killRestart("b2")},
	{name: "rolling-restart", about: "SIGTERM, start, wait ready: b1, then b2", run: rollingRestart("b1", "b2")},
	{name: "sigstop", about: "SIGSTOP b1 for 10 s, then SIGCONT", run: freeze("b1")},
	{name: "partition-both", about: "cut b1's ports both ways for 8 s", firewall: true, healedWithin: healBound, run: partition("b1", both)},
	{name: "partition-in", about: "drop what reaches b1's ports for 8 s", firewall: true, healedWithin: healBound, run: partition("b1", inbound)},
	{name: "partition-out", about: "drop what leaves b1's ports for 8 s", firewall: true, healedWithin: healBound, run: partition("b1", outbound)},
	{name: "hostile", about: "stalled and garbage connections against a2's RPC port", run: hostileConns("a2")},
	{name: "writers", about: "several bankload writer processes on the same accounts", severalWriters: true, run: func(ctx context.Context, e *env) error {
		e.note("%d writer processes", e.suite.Writers)
		return nil
	}},
	{name: "sequencer-kill9", about: "SIGKILL the leader of the service's writes mid-write, start it again", run: killSequencer},
	{name: "restart-in-catchup", about: "SIGKILL b2, start it, SIGKILL it again as soon as it is up, start it", run: restartDuringCatchUp("b2")},
	{name: "partition-groups", about: "cut group a from group b for 8 s, a writer beside each", sides: [][]string{{"a1", "a2"}, {"b1", "b2"}}, healedWithin: healBound, run: split},
	{name: "partition-lone", about: "cut b1 off from the other nodes for 8 s, a writer beside it and one beside them", sides: [][]string{{"b1"}, {"a1", "a2", "b2"}}, healedWithin: healBound, run: split},
	{name: "leader-freeze-under", about: "SIGSTOP the leader for 3/4 of the heartbeat timeout, five times", run: freezeLeader(0.75)},
	{name: "leader-freeze-over", about: "SIGSTOP the leader for 3/2 of the heartbeat timeout, five times", run: freezeLeader(1.5)},
	{name: "leader-stop", about: "SIGSTOP the leader 20 times, 1 s each: the time to the first write a new leader acknowledges", run: leaderStop},
	{name: "group-loss", about: "SIGKILL both nodes of the leader's group, start them again", run: groupLoss},
	{name: "group-loss-tiebreaker", about: "the same with a tie-breaker node t1 in group t: a majority stays", tieBreaker: true, run: groupLoss},
	{name: "rolling-restart-all", about: "SIGTERM, start, wait ready: every node in turn, the leader among them", run: rollingRestart("a1", "a2", "b1", "b2")},
	{name: "mixed-versions", about: "upgrade b1, then b2, to the next version of the service (a request field added in the middle, one widened from int32 to int64, one turned from string to bytes; a result field added and one removed; a method and a declared error added) and run both versions to the end; a writer of each version",
		severalWriters: true, nextVersion: true, run: upgrade("b1", "b2")},
}

func init() {
	faults = append(faults, durableFaults...)
	faults = append(faults, fault{name: "random", about: "a seeded random schedule of the faults above until 4/5 of the load: freezes of any node or the leader, kill -9 and restarts, graceful restarts, a lost disk, a node cut off, power cuts, a killed node removed from the voters and restarted once it says it is out",
		mayCut: true, env: []string{"FFGEN_MANAGE_WRITE=1"}, run: randomFaults})
}

// Faults of a new kind: their timings.
const (
	groupDownFor = 5 * time.Second // group-loss
	freezes      = 5               // leader-freeze-*
	freezeEvery  = 2 * time.Second
)

// split cuts the fault's sides off from each other (e.fw.split), heals
// them after a while, and times every node's catch-up.
func split(ctx context.Context, e *env) error {
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	if err := e.fw.split(ctx, e.sides); err != nil {
		return err
	}
	var names []string
	for _, sd := range e.sides {
		var ns []string
		for _, n := range sd.nodes {
			ns = append(ns, n.Name)
		}
		names = append(names, strings.Join(ns, ","))
	}
	e.note("split %s, a writer beside each side", strings.Join(names, " | "))
	sleep(ctx, e.bounded(cutFor, 0.4))
	if err := e.fw.heal(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	e.healed("healed")
	for _, sd := range e.sides {
		for _, n := range sd.nodes {
			e.recover(n)
		}
	}
	return nil
}

// freezeLeader SIGSTOPs the node leading the service's writes for frac of
// the heartbeat timeout, several times, finding the leader anew each time:
// just under the timeout no client should fail over, just over every
// client does, while the node may still believe it leads.
func freezeLeader(frac float64) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		d := time.Duration(frac * float64(e.suite.heartbeatTimeout()))
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		for i := range freezes {
			name, how, err := leader(ctx, e)
			if err != nil {
				return err
			}
			if err := e.freeze(e.Node(name), d); err != nil {
				return err
			}
			e.note("froze the leader %s (%s) for %v", name, how, d)
			if i < freezes-1 {
				sleep(ctx, e.bounded(freezeEvery, 0.1))
			}
		}
		return ctx.Err()
	}
}

// groupLoss SIGKILLs every node of the leader's failure group (group a if
// no node reports leading), and starts them again a few seconds later.
// With four voters the two left are no majority: no write may commit
// until the group is back. With a tie-breaker they are three of five.
func groupLoss(ctx context.Context, e *env) error {
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	group := testbed.Groups[0]
	if name, how, err := leader(ctx, e); err != nil {
		e.note("%v: losing group %s", err, group)
	} else {
		group = e.Node(name).Group
		e.note("the leader is %s (%s): losing group %s", name, how, group)
	}
	var lost []*testbed.Node
	for _, n := range e.Nodes {
		if n.Group == group {
			if err := e.Kill(n); err != nil {
				return err
			}
			lost = append(lost, n)
		}
	}
	sleep(ctx, e.bounded(groupDownFor, 0.2))
	for _, n := range lost {
		if err := e.restart(n); err != nil {
			return err
		}
	}
	return nil
}

func killRestart(name string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		n := e.Node(name)
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		if err := e.Kill(n); err != nil {
			return err
		}
		sleep(ctx, e.bounded(downFor, 0.15))
		return e.restart(n)
	}
}

func rollingRestart(names ...string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		return e.roll(ctx, names, "", func(*testbed.Node) {})
	}
}

// upgrade stops the named nodes one at a time and starts each with the
// next version's banknode (Suite.NextBinDir), waiting until it is ready:
// a rolling deploy that stops halfway, so that the cluster runs both
// versions under load until the audit.
func upgrade(names ...string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		err := e.roll(ctx, names, " upgraded:", func(n *testbed.Node) { n.UseBinDir(e.suite.NextBinDir) })
		if err != nil {
			return err
		}
		return checkVersions(ctx, e)
	}
}

// roll stops the named nodes one at a time (SIGTERM), prepares each
// (before), starts it again and waits until it is ready, noting how long
// it took, with what after its name.
func (e *env) roll(ctx context.Context, names []string, what string, before func(*testbed.Node)) error {
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	for _, name := range names {
		n := e.Node(name)
		if err := e.Terminate(n, 30*time.Second); err != nil {
			return err
		}
		before(n)
		if err := e.restart(n); err != nil {
			return err
		}
		if err := e.WaitReady(ctx, catchUpBound, n); err != nil {
			return err
		}
		e.note("%s%s ready %.1fs after its start", n.Name, what, time.Since(n.Started()).Seconds())
	}
	return nil
}

func freeze(name string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		return e.freeze(e.Node(name), e.bounded(freezeFor, 0.5))
	}
}

func partition(name string, d direction) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		n := e.Node(name)
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		if err := e.fw.cut(ctx, n, d); err != nil {
			return err
		}
		e.note("partitioned %s %s (rpc %s, gossip %s)", n.Name, d, n.RPC, n.Gossip)
		sleep(ctx, e.bounded(cutFor, 0.4))
		if err := e.fw.heal(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		e.healed("healed %s", n.Name)
		e.recover(n)
		return nil
	}
}

func hostileConns(name string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		n := e.Node(name)
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		before, _ := n.RSS()
		var peak int64
		hctx, cancel := context.WithTimeout(ctx, e.bounded(time.Hour, 0.5))
		defer cancel()
		watched := make(chan struct{})
		go func() { // the node's memory while under attack, where /proc tells
			defer close(watched)
			for hctx.Err() == nil {
				if kib, err := n.RSS(); err == nil {
					peak = max(peak, kib)
				}
				sleep(hctx, 200*time.Millisecond)
			}
		}()
		opened := hostile(hctx, n.RPC, 200, 4)
		cancel()
		<-watched
		e.note("%d hostile connections to %s (200 stalled after announcing a 4 MiB frame, the rest garbage)", opened, n.Name)
		if before > 0 && peak > 0 {
			e.note("%s resident memory %d MiB before, %d MiB at most during the attack", n.Name, before>>10, peak>>10)
		}
		return nil
	}
}

// killSequencer kills the node that orders the service's writes while
// writes are in flight, and starts it again.
func killSequencer(ctx context.Context, e *env) error {
	name, how, err := leader(ctx, e)
	if err != nil {
		return err
	}
	e.note("leader: %s (%s)", name, how)
	return killRestart(name)(ctx, e)
}

// leaderWait bounds how long leader waits for a node to report leading:
// between two faults an election may be under way (a leader starved of
// CPU on a loaded machine steps down when it has not heard from a quorum,
// as CheckQuorum asks), and a fault aimed at the leader waits for the
// next one rather than failing.
const leaderWait = 10 * time.Second

// leader finds the node that leads the service's writes, waiting up to
// leaderWait for one.
func leader(ctx context.Context, e *env) (name, how string, err error) {
	until := time.Now().Add(leaderWait)
	for {
		name, how, err = leaderNow(e)
		if err == nil || ctx.Err() != nil {
			return name, how, err
		}
		if time.Now().After(until) {
			return "", "", fmt.Errorf("%w within %v", err, leaderWait)
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// leaderNow finds the node that leads the service's writes: of the nodes
// that report leading, the one of the newest term (a leader that thawed
// may report leading until it hears of the newer one).
func leaderNow(e *env) (name, how string, err error) {
	reps, err := replicaStatuses(e)
	if err != nil {
		return "", "", err
	}
	var term uint64
	for _, n := range e.Nodes {
		if r, ok := reps[n.Name]; ok && r.Leading && r.Term >= term {
			name, term = n.Name, r.Term
			how = "it reports leading " + r.Service + fmt.Sprintf(" in term %d", r.Term)
		}
	}
	if name == "" {
		return "", "", errors.New("no node reports leading " + bank.AccountsDesc.Name)
	}
	return name, how, nil
}

// agreedLeader waits, up to leaderWait, until every node that answers
// follows one leader in one term, and returns it. A leader that thawed
// reports leading, and ready, until it hears of the newer one; and while
// it reads what reached it frozen, an append its old leader sent before
// freezing renews its lease, so that it ignores votes for an election
// timeout: a fault aimed at the leader before then would measure that too.
func agreedLeader(ctx context.Context, e *env) (string, error) {
	until := time.Now().Add(leaderWait)
	for {
		reps, err := replicaStatuses(e)
		if err != nil {
			return "", err
		}
		leader, term, agreed := "", uint64(0), len(reps) > 0
		for _, r := range reps {
			if leader == "" {
				leader, term = r.Leader, r.Term
			}
			agreed = agreed && r.Leader != "" && r.Leader == leader && r.Term == term
		}
		if agreed && reps[leader].Leading {
			return leader, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if time.Now().After(until) {
			return "", fmt.Errorf("the nodes did not agree on a leader of %s within %v: %+v", bank.AccountsDesc.Name, leaderWait, reps)
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// replicaStatuses asks every node how the service stands on it, by node
// name; a node that does not answer (down) is left out.
func replicaStatuses(e *env) (map[string]runtime.ReplicaStatus, error) {
	out := map[string]runtime.ReplicaStatus{}
	for _, n := range e.Nodes {
		resp, err := e.Client().Get("http://" + n.Mgmt + "/cluster/replicas")
		if err != nil {
			continue // a node down is asked no more
		}
		var reps []runtime.ReplicaStatus
		err = json.NewDecoder(resp.Body).Decode(&reps)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s /cluster/replicas: %w", n.Name, err)
		}
		for _, r := range reps {
			if r.Service == bank.AccountsDesc.Name {
				out[n.Name] = r
			}
		}
	}
	return out, nil
}

func restartDuringCatchUp(name string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		n := e.Node(name)
		if err := e.at(ctx, e.start()); err != nil {
			return err
		}
		if err := e.Kill(n); err != nil {
			return err
		}
		sleep(ctx, e.bounded(downFor, 0.15))
		if err := e.restart(n); err != nil {
			return err
		}
		// As soon as it answers at all, it is joining or catching up.
		deadline := time.Now().Add(catchUpBound)
		for !alive(e, n) && n.Running() && time.Now().Before(deadline) && ctx.Err() == nil {
			sleep(ctx, 20*time.Millisecond)
		}
		if e.Ready(n) {
			e.note("%s was already ready when killed again: it had nothing to catch up", n.Name)
		} else {
			e.note("%s killed again before it was ready", n.Name)
		}
		if err := e.Kill(n); err != nil {
			return err
		}
		return e.restart(n)
	}
}

func alive(e *env, n *testbed.Node) bool {
	resp, err := e.Client().Get("http://" + n.Mgmt + "/health/alive")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}
