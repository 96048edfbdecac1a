package runtime_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// counterVersions are three builds of the counter service during
// rollouts: v1, v2 with a replicated write Add2 added, and v3 whose Add
// reads its arguments otherwise (its schema's argument fingerprint
// differs, as a field added to them makes it).
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
				for e.leader(t) == victim {
					e.Restart(t, victim)
					e.WaitConverged(t)
				}

				add := func(key string) error {
					var res ledgerInt64Result
					return e.client.Invoke(ctx, m, &ledgerAddArgs{Account: key, Amount: 1}, &res)
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

// While a rollout mixes versions, a call goes to a node that serves its
// method: nodes advertise their methods in the membership, and routing
// passes over the owner that lacks it for the next-best member of the
// same group. Without that, an entity whose owners in both groups run
// the old version would be refused everywhere.
func TestRoutingFollowsAdvertisedMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		get := counterMethod("Get", runtime.ModeFailover, false)
		get.Service = "test.Versioned"
		get2 := counterMethod("Get", runtime.ModeFailover, false)
		get2.Service, get2.Name = "test.Versioned", "Get2"
		v1 := &runtime.ServiceDesc{Name: "test.Versioned", Methods: []*runtime.MethodDesc{get}}
		v2 := &runtime.ServiceDesc{Name: "test.Versioned", Methods: []*runtime.MethodDesc{get, get2}}
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
			var res ledgerInt64Result
			key := fmt.Sprintf("k%d", i)
			if err := client.Invoke(ctx, get2, &ledgerAddArgs{Account: key}, &res); err != nil {
				t.Errorf("Get2(%s), owners %v: %v", key, c.Owners("test.Versioned", key), err)
			}
		}
		// A method nobody serves is refused as not implemented, not
		// executed: routing falls back to the owner, which says so.
		get3 := counterMethod("Get", runtime.ModeFailover, false)
		get3.Service, get3.Name = "test.Versioned", "Get3"
		var res ledgerInt64Result
		err := client.Invoke(ctx, get3, &ledgerAddArgs{Account: "k"}, &res)
		if !errors.Is(err, runtime.ErrUnimplemented) || runtime.MaybeExecuted(err) {
			t.Errorf("a method no node serves: %v, want ErrUnimplemented, not executed", err)
		}
	})
}
