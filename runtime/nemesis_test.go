package runtime_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/testkit"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
)

// Faults nobody wrote down. The replication tests elsewhere replay
// sequences someone thought of; here a seeded schedule of random faults
// (freezes in which raft stands still, crashes and restarts from disk, graceful restarts, a lost
// disk, power cuts, partitions of any shape with clients on either side,
// one-way cuts, lost, delayed and reset connections, the leader singled
// out, an operator who removes a node that is down and restarts it once
// it says it is out) runs under writers and readers, and the history of every call is
// checked with porcupine, as Jepsen's nemesis does. A seed fixes the schedule; the goroutines' interleaving, which
// synctest does not fix, differs from run to run.
//
// make test runs the seeds below; -nemesis.seeds=N runs N more, from a
// seed it prints, and -nemesis.seed=S runs S alone.

var (
	nemesisSeeds = flag.Int("nemesis.seeds", 0, "run this many more random fault schedules in TestReplicationRandomFaults")
	nemesisSeed  = flag.Uint64("nemesis.seed", 0, "run only this fault schedule in TestReplicationRandomFaults")
)

func TestReplicationRandomFaults(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if *nemesisSeed != 0 {
		seeds = []uint64{*nemesisSeed}
	}
	if *nemesisSeeds > 0 {
		first := rand.Uint64() >> 16
		t.Logf("more schedules from seed %d", first)
		for i := range *nemesisSeeds {
			seeds = append(seeds, first+uint64(i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runNemesis(t, seed) })
		})
	}
}

// nemesis is a random fault schedule against a replEnv, and the faults it
// has in force, so that it can undo them all at the end.
type nemesis struct {
	e       *replEnv
	rng     *rand.Rand
	clients []string // the clients' network names
	killed  []string
	// removed are the nodes the operator removed while they were down
	// and has not restarted since they said they are out.
	removed []string
	// orng decides the operator's removals, apart from rng, so that a
	// seed's faults stay those it had before removals were added.
	orng *rand.Rand
	dirs map[string]string // each node's data directory; nil: state in memory
	log  []string          // what it did, in order, for the failure message
}

func runNemesis(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d))
	snapshots := seed%2 == 0
	// One schedule in three keeps the state in memory: every crash then
	// brings a node back empty, as a new member, which changes raft's
	// configuration twice (its earlier self removed, itself added).
	inMemory := seed%3 == 0
	cfg := fftest.Config{PerGroup: 2, Replication: runtime.ReplicationConfig{SnapshotEvery: 64}}
	var dirs map[string]string
	if !inMemory {
		cfg, dirs = durableConfig(t, cfg)
	}
	e := newReplEnv(t, cfg, snapshots)
	e.Net.Seed(seed)
	e.WaitReady(t)
	n := &nemesis{e: e, rng: rng, orng: rand.New(rand.NewPCG(seed, 0x72656d)), dirs: dirs}
	t.Logf("seed %d: snapshots %v, state in memory %v", seed, snapshots, inMemory)
	defer func() { t.Logf("seed %d, faults in order:\n%s", seed, strings.Join(n.log, "\n")) }()

	// Clients that know every node, and one per node that knows only it,
	// so that calls start on followers too, not only where the leader is
	// known to be.
	var routed, pinned []*runtime.Client
	for range 3 {
		routed = append(routed, e.newClient(t, func(cfg *runtime.ClientConfig) { cfg.Settings.MaxFailovers = 3 }))
		n.clients = append(n.clients, e.lastClient())
	}
	for _, m := range e.Members.Members() {
		view := runtime.NewStaticMembership()
		view.Set([]runtime.Member{m})
		pinned = append(pinned, e.newClient(t, func(cfg *runtime.ClientConfig) { cfg.Membership = view }))
		n.clients = append(n.clients, e.lastClient())
	}
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt() // a fatal check leaves no client running in the bubble
	for w, c := range routed {
		crng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			nemesisClient(e, []*runtime.Client{c, pinned[w%len(pinned)], pinned[(w+1)%len(pinned)]}, crng, w, keys, stop)
		})
	}

	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		n.fault(t)
		time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
	}
	n.healAll(t)
	e.WaitReady(t)
	halt()

	// Once healed, the cluster takes writes and linearizable reads again.
	ctx := t.Context()
	c := e.newClient(t)
	for _, k := range keys {
		if _, err := e.call(ctx, c, counterAdd, k, 1); err != nil {
			t.Errorf("write to %s after the faults healed: %v", k, err)
		}
		if _, err := e.call(ctx, c, counterReadNow, k, 0); err != nil {
			t.Errorf("linearizable read of %s after the faults healed: %v", k, err)
		}
	}
	e.check(t)
	ok, unsure, failed := e.hist.outcomes()
	t.Logf("seed %d: %d operations: %d answered, %d may have applied, %d failed; %d faults",
		seed, ok+unsure+failed, ok, unsure, failed, len(n.log))
	if ok == 0 {
		t.Errorf("no operation was answered")
	}
}

// nemesisClient makes calls through a random one of cs until stop closes:
// writes with new operation IDs, writes retried with the ID of an earlier
// one (the same key and amount, as a caller that retries sends them),
// linearizable reads and default reads, each with a timeout, with short
// random pauses between.
func nemesisClient(e *replEnv, cs []*runtime.Client, rng *rand.Rand, w int, keys []string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		c := cs[rng.IntN(len(cs))]
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		switch r := rng.IntN(10); {
		case r < 3:
			e.call(ctx, c, counterAdd, keys[rng.IntN(len(keys))], rng.Int64N(9)+1)
		case r < 5:
			e.addUntilKnown(c, rng, keys[rng.IntN(len(keys))], rng.Int64N(9)+1, stop)
		case r < 6:
			// IDs 1 to 240, 80 per client, each always the same write.
			id := byte(w*80 + rng.IntN(80) + 1)
			e.call(opCtx(ctx, id), c, counterAdd, keys[int(id)%len(keys)], int64(id%7)+1)
		case r < 8:
			e.call(ctx, c, counterReadNow, keys[rng.IntN(len(keys))], 0)
		default:
			e.call(ctx, c, counterGet, keys[rng.IntN(len(keys))], 0)
		}
		cancel()
		time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
	}
}

// addUntilKnown writes, and retries with the same operation ID while the
// write may have applied and may not, as a careful caller does, until it
// learns its result or stop closes. The history holds one operation, from
// the first call to the last answer.
func (e *replEnv) addUntilKnown(c *runtime.Client, rng *rand.Rand, key string, delta int64, stop <-chan struct{}) {
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:], rng.Uint64())
	binary.LittleEndian.PutUint64(id[8:], rng.Uint64())
	op := e.hist.begin(context.Background(), counterAdd.Name, key, delta)
	uncertain := false
	for {
		ctx, cancel := context.WithTimeout(runtime.WithOperationID(context.Background(), id), 3*time.Second)
		var res testledger.Int64Result
		err := c.Invoke(ctx, counterAdd, &testledger.AddArgs{Account: key, Amount: delta}, &res)
		cancel()
		uncertain = uncertain || runtime.MaybeExecuted(err)
		select {
		case <-stop:
		default:
			if err != nil && uncertain {
				time.Sleep(time.Duration(10+rng.Int64N(40)) * time.Millisecond)
				continue
			}
		}
		if err != nil && uncertain {
			err = context.DeadlineExceeded // still unknown: as MaybeExecuted says
		}
		e.hist.end(op, res.R0, err)
		return
	}
}

// fault applies one random fault, holds it for a random time, and undoes
// it (a crash is undone by a start, possibly later).
func (n *nemesis) fault(t *testing.T) {
	e, rng := n.e, n.rng
	nodes := e.names()
	pick := func() string { return nodes[rng.IntN(len(nodes))] }
	hold := time.Duration(100+rng.Int64N(2900)) * time.Millisecond
	did := n.did
	n.restartRemoved(t)
	k := rng.IntN(13)
	if n.dirs == nil && k >= 8 {
		n.crashInMemory(t, pick(), k == 11, hold)
		return
	}
	switch k {
	case 0: // a frozen node (SIGSTOP): nothing goes in or out, raft stands still
		v := pick()
		did("freeze %s for %v", v, hold)
		n.freeze(v, hold)
	case 1: // the leader frozen: it thaws believing it still leads
		v := n.leader(pick)
		did("freeze the leader %s for %v", v, hold)
		n.freeze(v, hold)
	case 2: // a node cut off from everyone
		v := pick()
		did("isolate %s for %v", v, hold)
		e.Net.Isolate(v)
		time.Sleep(hold)
		e.Net.Rejoin(v)
	case 3: // the leader cut off, with a client beside it
		v := n.leader(pick)
		cl := n.clients[rng.IntN(len(n.clients))]
		did("cut the leader %s and %s from the rest for %v", v, cl, hold)
		n.split(append([]string{v, cl}, ""), hold)
	case 4: // two sides of any shape, clients on either
		var side []string
		for _, x := range append(slices.Clone(nodes), n.clients...) {
			if rng.IntN(2) == 0 {
				side = append(side, x)
			}
		}
		did("partition %v from the rest for %v", side, hold)
		n.split(side, hold)
	case 5: // one-way cuts between random pairs
		var cuts []string
		for range 1 + rng.IntN(3) {
			a, b := pick(), pick()
			if a != b {
				e.Net.Cut(a, b)
				cuts = append(cuts, a+"->"+b)
			}
		}
		did("cut %v one way for %v", cuts, hold)
		time.Sleep(hold)
		e.Net.HealAll()
	case 6: // lossy and slow links
		var links []string
		for range 1 + rng.IntN(4) {
			a, b := pick(), pick()
			if a == b {
				continue
			}
			p, d := rng.Float64()/2, time.Duration(rng.Int64N(int64(40*time.Millisecond)))
			e.Net.Drop(a, b, p)
			e.Net.Delay(a, b, d)
			links = append(links, fmt.Sprintf("%s->%s lose %.2f delay %v", a, b, p, d))
		}
		did("%v for %v", links, hold)
		time.Sleep(hold)
		e.Net.HealAll()
	case 7: // every connection of a node reset
		v := pick()
		did("reset %s's connections", v)
		e.Net.ResetNode(v)
	case 8, 9: // kill -9, started again now or after the next faults
		v := pick()
		if slices.Contains(n.killed, v) {
			did("start %s", v)
			n.start(t, v)
			return
		}
		did("kill %s", v)
		e.Kill(t, v)
		n.killed = append(n.killed, v)
		if n.orng.IntN(2) == 0 {
			n.remove(v)
		}
		if rng.IntN(2) == 0 {
			time.Sleep(hold)
			did("start %s", v)
			n.start(t, v)
		}
	case 11: // a graceful restart: leadership handed over, state kept
		v := pick()
		if slices.Contains(n.killed, v) {
			return
		}
		did("shut %s down and start it", v)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e.Node(v).Server.Shutdown(ctx)
		cancel()
		e.Kill(t, v)
		n.start(t, v)
	case 12: // a lost disk: the node comes back empty, as a new member
		// Only while every other node is up and serves: one lost disk at a
		// time, beside a majority that holds every committed write, is the
		// fault raft is meant to survive.
		v := pick()
		for _, node := range e.Nodes {
			if node.Name != v && (slices.Contains(n.killed, node.Name) || node.Server.Ready() != nil) {
				return
			}
		}
		did("kill %s, delete its data directory, start it", v)
		if !slices.Contains(n.killed, v) {
			e.Kill(t, v)
		}
		if err := os.RemoveAll(n.dirs[v]); err != nil {
			t.Fatal(err)
		}
		n.start(t, v)
	case 10: // a power cut: every node killed at once, all started again
		did("power cut for %v", hold)
		for _, v := range nodes {
			if !slices.Contains(n.killed, v) {
				e.Kill(t, v)
			}
		}
		n.killed = nil
		time.Sleep(hold)
		for _, v := range nodes {
			e.Start(t, v)
		}
	}
}

// remove has the operator take v, which is down, for gone: RemoveReplica
// on the leader. v then comes back from its data directory believing it
// is a member, until a member tells it it is out (restartRemoved).
func (n *nemesis) remove(v string) {
	l := n.leader(func() string { return "" })
	if l == "" || l == v {
		n.did("no removal of %s: no leader", v)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := n.e.Node(l).Server.RemoveReplica(ctx, counterDesc.Name, v); err != nil {
		// It may apply all the same: proposed, then committed by the
		// next leader.
		n.did("the operator removes %s on %s: %v", v, l, err)
	} else {
		n.did("the operator removes %s on %s", v, l)
	}
	if !slices.Contains(n.removed, v) {
		n.removed = append(n.removed, v)
	}
}

// restartRemoved restarts the removed nodes that run and say they are
// out, as an operator would: each comes back as a new member, its state
// set aside.
func (n *nemesis) restartRemoved(t *testing.T) {
	for _, v := range slices.Clone(n.removed) {
		if slices.Contains(n.killed, v) || !n.e.Node(v).Server.Replication()[0].Removed {
			continue
		}
		n.did("%s says it is out: restart it", v)
		n.e.Kill(t, v)
		n.e.Start(t, v)
		n.removed = slices.DeleteFunc(n.removed, func(x string) bool { return x == v })
	}
}

// crashInMemory kills v and starts it again after hold, empty, or stops
// it gracefully and starts it at once; only while every node is up and
// serves. Losing a second node's state while the first is still being
// replaced would leave two of four voters, which can never change the
// configuration again: with the state in memory, the group is lost.
func (n *nemesis) crashInMemory(t *testing.T, v string, graceful bool, hold time.Duration) {
	e := n.e
	for _, node := range e.Nodes {
		if node.Server.Ready() != nil {
			n.did("no crash of %s: %s not ready", v, node.Name)
			return
		}
	}
	if graceful {
		n.did("shut %s down (it leaves the voters) and start it empty", v)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e.Node(v).Server.Shutdown(ctx)
		cancel()
		e.Kill(t, v)
	} else {
		n.did("kill %s for %v, start it empty", v, hold)
		e.Kill(t, v)
		time.Sleep(hold)
	}
	e.Start(t, v)
}

// freeze stops v for hold as SIGSTOP would: its frames are held, and its
// raft neither ticks nor steps, so that a leader thaws still leading, its
// term and lease as they were, with what reached it meanwhile to read.
// (The server's own timers run on: its frames are held all the same.)
func (n *nemesis) freeze(v string, hold time.Duration) {
	s := n.e.Node(v).Server
	n.e.Net.Pause(v)
	runtime.FreezeReplicas(s, true)
	time.Sleep(hold)
	runtime.FreezeReplicas(s, false)
	n.e.Net.Resume(v)
}

// split cuts the named network nodes from every other one, both ways, for
// hold.
func (n *nemesis) split(side []string, hold time.Duration) {
	all := append(n.e.names(), n.clients...)
	for _, a := range side {
		for _, b := range all {
			if a != "" && !slices.Contains(side, b) {
				n.e.Net.CutBoth(a, b)
			}
		}
	}
	time.Sleep(hold)
	n.e.Net.HealAll()
}

// did notes a fault, with the bubble's time since the schedule began.
func (n *nemesis) did(format string, args ...any) {
	n.log = append(n.log, fmt.Sprintf("%8v ", time.Duration(time.Now().UnixNano())%time.Hour)+fmt.Sprintf(format, args...))
}

// leader is the node that leads now, or another if none does.
func (n *nemesis) leader(otherwise func() string) string {
	for _, node := range n.e.Nodes {
		if slices.Contains(n.killed, node.Name) {
			continue
		}
		for _, st := range node.Server.Replication() {
			if st.Leading {
				return node.Name
			}
		}
	}
	return otherwise()
}

func (n *nemesis) start(t *testing.T, v string) {
	n.e.Start(t, v)
	n.killed = slices.DeleteFunc(n.killed, func(x string) bool { return x == v })
}

// healAll undoes every fault in force, and waits until every node
// serves: a node the operator removed is restarted once it says it is
// out. One whose removal never committed serves as the member it was;
// once all serve, the leader has committed what its log holds, so no
// removal is still to come.
func (n *nemesis) healAll(t *testing.T) {
	n.e.Net.HealAll()
	for _, v := range slices.Clone(n.killed) {
		n.did("start %s", v)
		n.start(t, v)
	}
	var notReady error
	if !testkit.Within(testkit.Bound, func() bool {
		n.restartRemoved(t)
		for _, node := range n.e.Nodes {
			if notReady = node.Server.Ready(); notReady != nil {
				notReady = fmt.Errorf("%s: %w", node.Name, notReady)
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not ready once the faults healed: %v", notReady)
	}
	n.removed = nil
}
