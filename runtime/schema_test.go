package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
)

// counterVersions are three builds of the counter service during
// rollouts: v1, v2 with a replicated write Add2 added, and v3 whose Add
// reads its arguments otherwise (its schema's argument fingerprint
// differs, as a field added to them makes it) and lists none of their
// fields, as a node of the release before the leader checked them: every
// voter must then advertise the same fingerprint.
func counterVersions() map[string]*runtime.ServiceDesc {
	add2 := counterMethod("Add", runtime.ModeScatter, false)
	add2.Name = "Add2"
	addV3 := counterMethod("Add", runtime.ModeScatter, false)
	addV3.Schema = runtime.MethodSchema{Args: 0xa4}
	return map[string]*runtime.ServiceDesc{
		"v1": counterDesc,
		"v2": {Name: "test.Counter", Methods: []*runtime.MethodDesc{counterAdd, counterGet, counterReadNow, add2}},
		"v3": {Name: "test.Counter", Methods: []*runtime.MethodDesc{addV3, counterGet, counterReadNow}},
	}
}

// A replicated write is proposed only when every voter can apply it: the
// leader checks what each voter advertises. A voter of an older build
// that lacks the method, or one whose version of the method reads its
// arguments otherwise, makes the leader refuse the write, typed and not
// executed, and no replica applies anything of it; once the voter runs
// the same version, the write goes through on every replica.
func TestReplicationWriteWaitsForEveryVoter(t *testing.T) {
	for _, tc := range []struct {
		name        string
		old, new    string // the victim's build, and every other node's
		method      string
		wantMessage string
	}{
		{"method-missing", "v1", "v2", "Add2", "does not serve test.Counter.Add2"},
		{"other-arguments", "v1", "v3", "Add", "serves test.Counter.Add with other arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				versions := counterVersions()
				build := map[string]string{}
				e := &replEnv{Cluster: fftest.New(t, fftest.Config{PerGroup: 2}), counters: map[string]*counter{}}
				// The first node of group b is the victim: it runs the
				// old build until the test upgrades it.
				victim := e.Nodes[len(e.Nodes)/2].Name
				for _, n := range e.Nodes {
					build[n.Name] = tc.new
				}
				build[victim] = tc.old
				e.ServeVersions(t, func(n *fftest.Node) *runtime.ServiceDesc { return versions[build[n.Name]] },
					func(n *fftest.Node) any {
						c := newCounter(n.Name)
						e.counters[n.Name] = c
						return c
					})
				e.client = e.newClient(t)
				ctx := t.Context()
				m := methodOf(versions[tc.new], tc.method)
				// The victim must not lead: it would answer a method it
				// lacks as not implemented, before any voter check. A
				// restart makes it a new member, which the others lead.
				for e.Leader(t, counterDesc.Name) == victim {
					e.Restart(t, victim)
					e.WaitConverged(t)
				}

				add := func(key string) error {
					var res testledger.Int64Result
					return e.client.Invoke(ctx, m, &testledger.AddArgs{Account: key, Amount: 1}, &res)
				}
				err := add("x")
				if !errors.Is(err, runtime.ErrVotersCannotApply) || runtime.MaybeExecuted(err) {
					t.Fatalf("%s with voter %s at %s: %v (maybe executed %v), want ErrVotersCannotApply, not executed",
						tc.method, victim, tc.old, err, runtime.MaybeExecuted(err))
				}
				if !strings.Contains(err.Error(), tc.wantMessage) || !strings.Contains(err.Error(), victim) {
					t.Errorf("error %q does not name %s and say %q", err, victim, tc.wantMessage)
				}
				// A write every voter applies alike still goes through.
				if tc.method != "Add" {
					if _, err := e.add(ctx, "k", 1); err != nil {
						t.Fatalf("Add, which every voter serves alike: %v", err)
					}
				}
				e.WaitConverged(t)
				for name, c := range e.counters {
					if v, ok := c.state()["x"]; ok {
						t.Errorf("replica %s applied the refused write: x = %d", name, v)
					}
				}
				e.check(t)

				// The victim is upgraded: the same write goes through.
				build[victim] = tc.new
				e.Restart(t, victim)
				e.WaitConverged(t)
				if err := add("x"); err != nil {
					t.Fatalf("%s once every voter runs %s: %v", tc.method, tc.new, err)
				}
				e.WaitConverged(t)
				for _, n := range e.Nodes {
					if got := e.counters[n.Name].state()["x"]; got != 1 {
						t.Errorf("replica %s: x = %d after the upgrade, want 1", n.Name, got)
					}
				}
				want := fmt.Sprint(e.counters[e.Nodes[0].Name].state())
				for _, n := range e.Nodes {
					if got := fmt.Sprint(e.counters[n.Name].state()); got != want {
						t.Errorf("replica %s holds %s, %s holds %s", n.Name, got, e.Nodes[0].Name, want)
					}
				}
			})
		})
	}
}

func methodOf(svc *runtime.ServiceDesc, name string) *runtime.MethodDesc {
	for _, m := range svc.Methods {
		if m.Name == name {
			return m
		}
	}
	panic("no method " + name)
}

// versionedService is test.Versioned in two builds: v1 serves Get, v2 also
// Get2, in mode (a hedge's delay is 50 ms).
func versionedService(mode runtime.Mode) (get, get2 *runtime.MethodDesc, v1, v2 *runtime.ServiceDesc) {
	get = counterMethod("Get", runtime.ModeFailover, false)
	get.Service = "test.Versioned"
	get2 = counterMethod("Get", mode, false)
	get2.Service, get2.Name, get2.Hedge = "test.Versioned", "Get2", 50*time.Millisecond
	v1 = &runtime.ServiceDesc{Name: "test.Versioned", Methods: []*runtime.MethodDesc{get}}
	v2 = &runtime.ServiceDesc{Name: "test.Versioned", Methods: []*runtime.MethodDesc{get, get2}}
	return get, get2, v1, v2
}

// While a rollout mixes versions, a call goes to a node that serves its
// method: nodes advertise their methods in the membership, and routing
// passes over the owner that lacks it for the next-best member of the
// same group. Without that, an entity whose owners in both groups run
// the old version would be refused everywhere.
func TestRoutingFollowsAdvertisedMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, get2, v1, v2 := versionedService(runtime.ModeFailover)
		c := fftest.New(t, fftest.Config{PerGroup: 3})
		upgraded := map[string]bool{}
		for i, n := range c.Nodes {
			upgraded[n.Name] = i%3 == 0 // one node of each group
		}
		c.ServeVersions(t, func(n *fftest.Node) *runtime.ServiceDesc {
			if upgraded[n.Name] {
				return v2
			}
			return v1
		}, func(n *fftest.Node) any { return newCounter(n.Name) })
		client := c.Client(t)
		ctx := t.Context()
		for i := range 40 {
			var res testledger.Int64Result
			key := fmt.Sprintf("k%d", i)
			if err := client.Invoke(ctx, get2, &testledger.AddArgs{Account: key}, &res); err != nil {
				t.Errorf("Get2(%s), owners %v: %v", key, c.Owners("test.Versioned", key), err)
			}
		}
		// A method nobody serves is refused as not implemented, not
		// executed: routing falls back to the owner, which says so.
		get3 := counterMethod("Get", runtime.ModeFailover, false)
		get3.Service, get3.Name = "test.Versioned", "Get3"
		var res testledger.Int64Result
		err := client.Invoke(ctx, get3, &testledger.AddArgs{Account: "k"}, &res)
		if !errors.Is(err, runtime.ErrUnimplemented) || runtime.MaybeExecuted(err) {
			t.Errorf("a method no node serves: %v, want ErrUnimplemented, not executed", err)
		}
	})
}

// A refusal is its node's own, so it costs the operation no failover: a
// draining node's calls go to its group-mate. Sent on along the entity's
// order, a call refused by its owner in the first group and then by its
// owner in the next, both draining, failed beside two group-mates that
// would have run it. During a rollout, a method that only the upgraded
// group serves goes to that group alone: a call the group not yet
// upgraded refused as unimplemented and the draining owner refused as
// shutting down had spent both of its attempts. Hedged calls go the
// same way.
func TestRefusalGoesToTheGroupMate(t *testing.T) {
	for _, mode := range []runtime.Mode{runtime.ModeFailover, runtime.ModeHedge} {
		t.Run(mode.String()+"/two-draining", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { refusalGoesToTheGroupMate(t, mode, false) })
		})
		t.Run(mode.String()+"/rollout", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { refusalGoesToTheGroupMate(t, mode, true) })
		})
	}
}

// refusalGoesToTheGroupMate drains a2 and b2 at once, or during a rollout
// in which only group b serves the method called, b2 alone, and calls the
// entities that no other owner serves.
func refusalGoesToTheGroupMate(t *testing.T, mode runtime.Mode, rollout bool) {
	_, get2, v1, v2 := versionedService(mode)
	c := fftest.New(t, fftest.Config{PerGroup: 2})
	counters := map[string]*counter{}
	c.ServeVersions(t, func(n *fftest.Node) *runtime.ServiceDesc {
		if rollout && n.Group == "a" {
			return v1
		}
		return v2
	}, func(n *fftest.Node) any {
		counters[n.Name] = newCounter(n.Name)
		return counters[n.Name]
	})
	draining := map[string]bool{"a2": true, "b2": true}
	if rollout {
		delete(draining, "a2")
	}
	client := c.Client(t)
	ctx := t.Context()
	invoke := func(key string) error {
		var res testledger.Int64Result
		return client.Invoke(ctx, get2, &testledger.AddArgs{Account: key}, &res)
	}
	// The client connects to every node before the drain (a draining
	// node refuses what comes on the connections it has). held is a key
	// whose first attempt goes to each draining node; targets are keys
	// whose every owner that serves Get2 drains.
	held := map[string]string{}
	var targets []string
	for i := 0; len(targets) < 10 || len(held) < len(draining); i++ {
		key := fmt.Sprintf("k%d", i)
		if err := invoke(key); err != nil {
			t.Fatalf("Get2(%s) before the drain: %v", key, err)
		}
		owners := c.Owners("test.Versioned", key)
		if rollout {
			owners = slices.DeleteFunc(owners, func(n string) bool { return n[0] == 'a' })
		}
		if first := owners[0]; draining[first] && held[first] == "" {
			held[first] = key
			continue
		}
		if !slices.ContainsFunc(owners, func(n string) bool { return !draining[n] }) {
			targets = append(targets, key)
		}
	}
	if rollout {
		// Group a was not even asked: it would have refused.
		for _, n := range c.Nodes {
			if got := refusedCalls(n.Server, "Get2"); n.Group == "a" && got > 0 {
				t.Errorf("%s, which does not serve Get2, was sent %d of them", n.Name, got)
			}
		}
	}

	// A call each draining node runs holds its Shutdown open: it refuses
	// the next ones while it drains, as a node being restarted does.
	before := map[string]int{}
	for _, n := range c.Nodes {
		before[n.Name] = counters[n.Name].reads()
	}
	hold := make(chan struct{})
	heldErrs, drained := make(chan error, len(held)), make(chan error, len(held))
	for node, key := range held {
		counters[node].setGetHook(func(ctx context.Context, key string) error {
			<-hold
			return nil
		})
		go func() { heldErrs <- invoke(key) }()
	}
	synctest.Wait()
	for node := range held {
		go func() { drained <- c.Node(node).Server.Shutdown(ctx) }()
	}
	synctest.Wait()

	for _, key := range targets {
		if err := invoke(key); err != nil {
			t.Errorf("Get2(%s), owners %v, draining %v: %v", key, c.Owners("test.Versioned", key), draining, err)
		}
	}
	mates := 0
	for _, n := range c.Nodes {
		if !draining[n.Name] {
			mates += counters[n.Name].reads() - before[n.Name]
		}
	}
	if mates != len(targets) {
		t.Errorf("the group-mates ran %d calls while the owners drained, want %d", mates, len(targets))
	}
	close(hold)
	for range held {
		if err := <-heldErrs; err != nil {
			t.Errorf("a call a node ran as it began to drain: %v", err)
		}
		if err := <-drained; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	}
	var refused uint64
	for node := range held {
		if got := counters[node].reads() - before[node]; got != 1 {
			t.Errorf("%s ran %d calls from the start of its drain, want the 1 it held", node, got)
		}
		refused += refusedCalls(c.Node(node).Server, "Get2")
	}
	// Each call was refused by its first owner alone: the group-mate
	// ran it.
	if refused != uint64(len(targets)) {
		t.Errorf("the draining nodes refused %d calls, want %d: each once", refused, len(targets))
	}
}

// An operation asks no node twice once it refused: with failovers to
// spare, a call that every node refuses ends after one attempt at each,
// as refused with the refusal's error, not executed.
func TestRefusingNodeIsNotAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.MaxFailovers = 5
		c := fftest.New(t, fftest.Config{PerGroup: 2, Settings: s})
		c.Serve(t, counterDesc, func(n *fftest.Node) any { return newCounter(n.Name) })
		missing := counterMethod("Get", runtime.ModeFailover, false)
		missing.Name = "Missing"
		var res testledger.Int64Result
		err := c.Client(t).Invoke(t.Context(), missing, &testledger.AddArgs{Account: "k"}, &res)
		var e *runtime.Error
		if !errors.Is(err, runtime.ErrUnimplemented) || runtime.MaybeExecuted(err) || !errors.As(err, &e) {
			t.Fatalf("a method no node serves: %v, want ErrUnimplemented, not executed", err)
		}
		asked := map[string]int{}
		for _, h := range e.History {
			if h.Node != "" {
				asked[h.Node]++
			}
		}
		if len(asked) != len(c.Nodes) {
			t.Errorf("asked %v, want every node of %d once", asked, len(c.Nodes))
		}
		for n, times := range asked {
			if times != 1 {
				t.Errorf("%s asked %d times: %v", n, times, err)
			}
		}
		// Once every node has refused, one pass over the groups finds it
		// and the operation ends there, failovers to spare or not.
		if max := len(c.Nodes) + len(c.Settings.Groups); len(e.History) > max {
			t.Errorf("%d entries in the history, want at most %d: %v", len(e.History), max, err)
		}
	})
}

// A client tells a node not to remember an operation's result only while
// its attempts cannot come back to that node: MaxFailovers below the
// groups of the call's order. During a rollout the order holds only the
// groups that serve the method, and with one such group the next attempt
// goes back to it: its results are remembered, as with too few groups.
func TestRolloutOrderKeepsResults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		get, get2, v1, v2 := versionedService(runtime.ModeFailover)
		c := fftest.New(t, fftest.Config{PerGroup: 2})
		c.ServeVersions(t, func(n *fftest.Node) *runtime.ServiceDesc {
			if n.Group == "b" {
				return v2
			}
			return v1
		}, func(n *fftest.Node) any { return newCounter(n.Name) })
		client := c.Client(t)
		remembered := func() (n int) {
			for _, node := range c.Nodes {
				n += node.Server.Remembered()
			}
			return n
		}
		var res testledger.Int64Result
		for i := range 5 {
			if err := client.Invoke(t.Context(), get, &testledger.AddArgs{Account: fmt.Sprint(i)}, &res); err != nil {
				t.Fatal(err)
			}
		}
		if n := remembered(); n != 0 {
			t.Errorf("calls whose attempts go to distinct groups left %d results remembered, want 0", n)
		}
		for i := range 5 {
			if err := client.Invoke(t.Context(), get2, &testledger.AddArgs{Account: fmt.Sprint(i)}, &res); err != nil {
				t.Fatal(err)
			}
		}
		if n := remembered(); n != 5 {
			t.Errorf("calls of a method one group serves left %d results remembered, want 5", n)
		}
	})
}

// refreshing is a membership that counts the client's requests to renew
// its view.
type refreshing struct {
	*runtime.StaticMembership
	refreshes atomic.Int32
}

func (m *refreshing) Refresh() { m.refreshes.Add(1) }

// A node's refusal says the client's view missed something (the node
// drains, catches up, or does not serve the method yet), so a membership
// that can renew its view is asked to, once per refusal and never for a
// call that no node refused: a thin client would otherwise learn of a
// node back with a new method only at its next poll.
func TestRefusalRefreshesTheMembership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{PerGroup: 2})
		c.Serve(t, counterDesc, func(n *fftest.Node) any { return newCounter(n.Name) })
		members := &refreshing{StaticMembership: c.Members}
		client := c.Client(t, func(cfg *runtime.ClientConfig) { cfg.Membership = members })
		get := func(method *runtime.MethodDesc) error {
			var res testledger.Int64Result
			return client.Invoke(t.Context(), method, &testledger.AddArgs{Account: "k"}, &res)
		}
		if err := get(counterGet); err != nil {
			t.Fatal(err)
		}
		if n := members.refreshes.Load(); n != 0 {
			t.Errorf("a call no node refused asked for %d refreshes", n)
		}
		missing := counterMethod("Get", runtime.ModeFailover, false)
		missing.Name = "Missing"
		err := get(missing)
		var e *runtime.Error
		if !errors.As(err, &e) {
			t.Fatalf("a method no node serves: %v", err)
		}
		refused := 0
		for _, h := range e.History {
			if h.Node != "" && h.Reason == runtime.ReasonRefused {
				refused++
			}
		}
		if n := members.refreshes.Load(); refused == 0 || int(n) != refused {
			t.Errorf("%d refreshes for %d refusals: %v", n, refused, err)
		}
	})
}

// refusedCalls is how many attempts of method srv refused unrun.
func refusedCalls(srv *runtime.Server, method string) uint64 {
	var n uint64
	for _, m := range srv.Served() {
		if m.Method != method {
			continue
		}
		for _, a := range m.Answers {
			if a.Status == "refused" {
				n += a.N
			}
		}
	}
	return n
}

// putArgs are the arguments of test.Counter.Put in protobuf's wire
// format, as ffgen generates them, in two versions: v1 carries Account (1)
// and Amount (2) as an int32; v2 widens Amount to an int64 and adds Note
// (3), which it applies as part of the key.
type putArgs struct {
	Account string
	Amount  int64
	Note    string
	bits    int // Amount's width in this version
}

func (a *putArgs) AppendFF(b []byte) []byte {
	if a.Account != "" {
		b = codec.AppendStringField(b, 1, a.Account)
	}
	if a.Amount != 0 {
		b = codec.AppendVarintField(b, 2, a.Amount)
	}
	if a.Note != "" {
		b = codec.AppendStringField(b, 3, a.Note)
	}
	return b
}

func (a *putArgs) UnmarshalFF(b []byte) error {
	bits := a.bits
	*a = putArgs{bits: bits}
	return codec.DecodeMessage(b, func(num codec.Number, typ codec.WireType, b []byte) (n int, err error) {
		switch {
		case num == 1:
			a.Account, n, err = codec.ConsumeStringField(b, typ)
		case num == 2:
			a.Amount, n, err = codec.ConsumeVarintField(b, typ, bits)
		case num == 3 && bits == 64:
			a.Note, n, err = codec.ConsumeStringField(b, typ)
		default:
			n, err = codec.SkipField(b, num, typ)
		}
		return n, err
	})
}

// putVersions are the counter service with Put at v1 and at v2 (see
// putArgs), each descriptor listing the fields its arguments can carry as
// ffgen generates them.
func putVersions() map[string]*runtime.ServiceDesc {
	put := func(bits int, fields ...string) *runtime.MethodDesc {
		m := counterMethod("Put", runtime.ModeScatter, false)
		m.Schema = runtime.MethodSchema{Args: uint64(bits), Fields: fields}
		m.Entities = func(args codec.Message, dst []string) []string {
			return append(dst, args.(*putArgs).Account)
		}
		m.NewArgs = func() codec.Message { return &putArgs{bits: bits} }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*putArgs)
			key := a.Account
			if a.Note != "" {
				key += "#" + a.Note
			}
			v, err := impl.(*counter).Add(ctx, key, a.Amount)
			return &testledger.Int64Result{R0: v}, err
		}
		return m
	}
	return map[string]*runtime.ServiceDesc{
		"v1": {Name: "test.Counter", Methods: []*runtime.MethodDesc{counterAdd, counterGet, counterReadNow,
			put(32, "(Put) 1 account bytes", "(Put) 2 amount int32")}},
		"v2": {Name: "test.Counter", Methods: []*runtime.MethodDesc{counterAdd, counterGet, counterReadNow,
			put(64, "(Put) 1 account bytes", "(Put) 2 amount int64", "(Put) 3 note bytes")}},
	}
}

// During a rollout that changes a replicated write's arguments, the leader
// decides write by write, as protobuf would or better: a write whose
// arguments carry only fields every voter knows, with values their kinds
// hold, is proposed; one that sets the new field, or a widened field to a
// value an old voter cannot hold, is refused, typed and not executed,
// naming the voter and the field (protobuf would let the old voter drop
// the field or wrap the value, and the replicas drift). Once the voter is
// upgraded, the same writes go through on every replica.
func TestReplicationWriteChecksTheFieldsItCarries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		versions := putVersions()
		build := map[string]string{}
		e := &replEnv{Cluster: fftest.New(t, fftest.Config{PerGroup: 2}), counters: map[string]*counter{}}
		victim := e.Nodes[len(e.Nodes)/2].Name
		for _, n := range e.Nodes {
			build[n.Name] = "v2"
		}
		build[victim] = "v1"
		e.ServeVersions(t, func(n *fftest.Node) *runtime.ServiceDesc { return versions[build[n.Name]] },
			func(n *fftest.Node) any {
				c := newCounter(n.Name)
				e.counters[n.Name] = c
				return c
			})
		e.client = e.newClient(t)
		ctx := t.Context()
		for e.Leader(t, counterDesc.Name) == victim {
			e.Restart(t, victim)
			e.WaitConverged(t)
		}
		put := func(version string, a putArgs) error {
			var res testledger.Int64Result
			return e.client.Invoke(ctx, methodOf(versions[version], "Put"), &a, &res)
		}
		equal := func(want map[string]int64) {
			t.Helper()
			e.WaitConverged(t)
			for _, n := range e.Nodes {
				if got := e.counters[n.Name].state(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("replica %s (%s) holds %v, want %v", n.Name, build[n.Name], got, want)
				}
			}
		}

		// Writes that leave the new field unset, from either version, and
		// a widened field's value that an int32 holds: accepted.
		if err := put("v2", putArgs{Account: "a", Amount: 5}); err != nil {
			t.Fatalf("v2 write without the new field: %v", err)
		}
		if err := put("v1", putArgs{Account: "a", Amount: -7}); err != nil {
			t.Fatalf("v1 write: %v", err)
		}
		if err := put("v2", putArgs{Account: "b", Amount: 1<<31 - 1}); err != nil {
			t.Fatalf("v2 write of the largest int32: %v", err)
		}
		equal(map[string]int64{"a": -2, "b": 1<<31 - 1})

		// The new field set, or a value only the wider kind holds:
		// refused, not executed, naming the voter and the field.
		for _, tc := range []struct {
			args putArgs
			want string
		}{
			{putArgs{Account: "a", Amount: 1, Note: "n"}, "does not know field note (3) of (Put)"},
			{putArgs{Account: "a", Amount: 5_000_000_000}, "amount (2) of (Put), which the write to test.Counter.Put carries, with a kind that cannot hold its value 5000000000"},
			{putArgs{Account: "a", Amount: -1<<31 - 1}, "cannot hold its value -2147483649"},
		} {
			err := put("v2", tc.args)
			if !errors.Is(err, runtime.ErrVotersCannotApply) || runtime.MaybeExecuted(err) {
				t.Fatalf("v2 write %+v with voter %s at v1: %v (maybe executed %v), want ErrVotersCannotApply, not executed",
					tc.args, victim, err, runtime.MaybeExecuted(err))
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "voter "+victim) {
				t.Errorf("error %q does not name voter %s and say %q", err, victim, tc.want)
			}
		}
		equal(map[string]int64{"a": -2, "b": 1<<31 - 1})
		e.check(t)

		// The voter is upgraded: the same writes go through.
		build[victim] = "v2"
		e.Restart(t, victim)
		e.WaitConverged(t)
		if err := put("v2", putArgs{Account: "a", Amount: 1, Note: "n"}); err != nil {
			t.Fatalf("the new field once every voter knows it: %v", err)
		}
		if err := put("v2", putArgs{Account: "a", Amount: 5_000_000_000}); err != nil {
			t.Fatalf("an int64 once every voter holds it: %v", err)
		}
		equal(map[string]int64{"a": 4_999_999_998, "a#n": 1, "b": 1<<31 - 1})
	})
}
