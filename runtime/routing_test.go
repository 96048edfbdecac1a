package runtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testMembers returns perGroup members in each group, all serving svc.
func testMembers(groups []string, perGroup int, svc ...string) []Member {
	var ms []Member
	for _, g := range groups {
		for i := range perGroup {
			name := fmt.Sprintf("%s-node-%d", g, i)
			ms = append(ms, Member{Name: name, Group: g, Addr: name + ":7000", Services: svc})
		}
	}
	return ms
}

func entities(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("account-%d", i)
	}
	return out
}

// owners returns each entity's owner name in group g.
func owners(r *router, svc string, g int, ents []string) []string {
	out := make([]string, len(ents))
	for i, e := range ents {
		m, ok := r.owner(svc, g, e, nil)
		if !ok {
			panic("no owner for " + e)
		}
		out[i] = m.Name
	}
	return out
}

// TestRoutingGolden pins the hash function: it is part of the protocol, so
// changing it breaks clusters that run mixed versions.
func TestRoutingGolden(t *testing.T) {
	r := newRouter([]string{"eu-1", "eu-2", "eu-3"})
	r.update(testMembers(r.groups, 4, "bank.Accounts"))
	got := map[string]string{}
	for _, e := range []string{"account-1", "account-2", "", "ünïcode"} {
		order := r.groupOrder(e, nil)
		m, _ := r.owner("bank.Accounts", order[0], e, nil)
		got[e] = fmt.Sprint(order, " ", m.Name)
	}
	want := map[string]string{
		"account-1": "[0 1 2] eu-1-node-3",
		"account-2": "[2 1 0] eu-3-node-2",
		"":          "[0 1 2] eu-1-node-3",
		"ünïcode":   "[0 1 2] eu-1-node-0",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("routing changed (-want +got):\n%s", diff)
	}
}

func TestRoutingStableAcrossMemberOrder(t *testing.T) {
	groups := []string{"a", "b", "c"}
	ms := testMembers(groups, 7, "svc")
	r1, r2 := newRouter(groups), newRouter(groups)
	r1.update(ms)
	shuffled := slices.Clone(ms)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	r2.update(shuffled)

	if diff := cmp.Diff(r1.members("svc"), r2.members("svc")); diff != "" {
		t.Fatalf("Members depends on input order (-r1 +r2):\n%s", diff)
	}
	var o1, o2 []int
	for _, e := range entities(2000) {
		o1, o2 = r1.groupOrder(e, o1), r2.groupOrder(e, o2)
		if !slices.Equal(o1, o2) {
			t.Fatalf("GroupOrder(%q): %v vs %v", e, o1, o2)
		}
		if s := slices.Sorted(slices.Values(o1)); !slices.Equal(s, []int{0, 1, 2}) {
			t.Fatalf("GroupOrder(%q) = %v, not a permutation of the groups", e, o1)
		}
		for g := range groups {
			m1, _ := r1.owner("svc", g, e, nil)
			m2, _ := r2.owner("svc", g, e, nil)
			if m1.Name != m2.Name || m1.Group != groups[g] {
				t.Fatalf("Owner(%q, group %d): %q vs %q", e, g, m1.Name, m2.Name)
			}
		}
	}
}

// TestRoutingMinimalMovement: when a member joins or leaves a group of n,
// about 1/n of the entities change owner, and only to or from that member.
func TestRoutingMinimalMovement(t *testing.T) {
	const n, numEntities = 10, 20000
	groups := []string{"a", "b"}
	ms := testMembers(groups, n, "svc")
	ents := entities(numEntities)
	r := newRouter(groups)
	r.update(ms)
	before := owners(r, "svc", 0, ents)

	// Join: an eleventh member takes about 1/11 of the entities.
	joiner := Member{Name: "a-node-new", Group: "a", Services: []string{"svc"}}
	r.update(append(slices.Clone(ms), joiner))
	afterJoin := owners(r, "svc", 0, ents)
	moved := 0
	for i := range ents {
		if before[i] != afterJoin[i] {
			moved++
			if afterJoin[i] != joiner.Name {
				t.Fatalf("%s moved from %s to %s, not to the joiner", ents[i], before[i], afterJoin[i])
			}
		}
	}
	checkWithin(t, "entities moved on join", moved, numEntities/(n+1), 0.15)

	// Leave: exactly the entities of the member that left move.
	leaver := ms[3].Name
	r.update(slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m.Name == leaver }))
	afterLeave := owners(r, "svc", 0, ents)
	moved = 0
	for i := range ents {
		if (before[i] == leaver) != (before[i] != afterLeave[i]) {
			t.Fatalf("%s: owner %s before, %s after %s left", ents[i], before[i], afterLeave[i], leaver)
		}
		if afterLeave[i] == leaver {
			t.Fatalf("%s still routed to %s, which left", ents[i], leaver)
		}
		if before[i] == leaver {
			moved++
		}
	}
	checkWithin(t, "entities moved on leave", moved, numEntities/n, 0.15)

	// The other group is untouched by changes in group a.
	r.update(ms)
	b := owners(r, "svc", 1, ents)
	r.update(append(slices.Clone(ms), joiner))
	if !slices.Equal(b, owners(r, "svc", 1, ents)) {
		t.Fatal("a join in group a moved entities in group b")
	}
}

// checkWithin fails unless got is within frac (relative) of want.
func checkWithin(t *testing.T, what string, got, want int, frac float64) {
	t.Helper()
	if d := float64(got - want); d > frac*float64(want) || -d > frac*float64(want) {
		t.Errorf("%s = %d, want %d ± %.0f%%", what, got, want, frac*100)
	}
}

// TestRoutingSpread: each group comes first, and each member owns, about
// an equal share of the entities.
func TestRoutingSpread(t *testing.T) {
	const numEntities = 30000
	groups := []string{"eu-1", "eu-2", "eu-3"}
	r := newRouter(groups)
	r.update(testMembers(groups, 10, "svc"))
	ents := entities(numEntities)

	first := make([]int, len(groups))
	perms := map[string]int{}
	var order []int
	for _, e := range ents {
		order = r.groupOrder(e, order)
		first[order[0]]++
		perms[fmt.Sprint(order)]++
	}
	for g, c := range first {
		checkWithin(t, "entities with group "+groups[g]+" first", c, numEntities/len(groups), 0.10)
	}
	if len(perms) != 6 {
		t.Errorf("%d group orders seen, want all 6", len(perms))
	}
	for p, c := range perms {
		checkWithin(t, "entities with group order "+p, c, numEntities/6, 0.10)
	}

	owned := map[string]int{}
	for _, name := range owners(r, "svc", 1, ents) {
		owned[name]++
	}
	if len(owned) != 10 {
		t.Fatalf("%d members own entities, want 10", len(owned))
	}
	for name, c := range owned {
		checkWithin(t, "entities owned by "+name, c, numEntities/10, 0.10)
	}
}

func TestRoutingSkip(t *testing.T) {
	groups := []string{"a", "b"}
	ms := testMembers(groups, 5, "svc")
	r := newRouter(groups)
	r.update(ms)
	for _, e := range entities(500) {
		owner, _ := r.owner("svc", 0, e, nil)
		// Skipping the owner gives the owner of a view without it.
		next, ok := r.owner("svc", 0, e, func(name string) bool { return name == owner.Name })
		without := newRouter(groups)
		without.update(slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m.Name == owner.Name }))
		want, _ := without.owner("svc", 0, e, nil)
		if !ok || next.Name != want.Name || next.Name == owner.Name {
			t.Fatalf("%s: skipping %s gave %q (ok %v), want %q", e, owner.Name, next.Name, ok, want.Name)
		}
	}
	if m, ok := r.owner("svc", 0, "x", func(string) bool { return true }); ok {
		t.Fatalf("everything skipped: got %q, want none", m.Name)
	}
}

func TestRoutingServicesAndUnknownGroups(t *testing.T) {
	r := newRouter([]string{"a", "b"})
	ignored := r.update([]Member{
		{Name: "n1", Group: "a", Services: []string{"orders", "billing", "orders"}},
		{Name: "n2", Group: "b", Services: []string{"billing"}},
		{Name: "n3", Group: "zz", Services: []string{"orders"}},
		{Name: "", Group: "a", Services: []string{"orders"}},
		{Name: "n1", Group: "b", Services: []string{"orders"}},
		{Name: "n4", Group: "b"},
	})
	if got := len(ignored); got != 3 || ignored[0].Name != "n3" || ignored[1].Name != "" || ignored[2].Group != "b" {
		t.Fatalf("ignored = %+v, want n3 (unknown group), the nameless one and the second n1", ignored)
	}
	if m, ok := r.owner("orders", 0, "e", nil); !ok || m.Name != "n1" {
		t.Fatalf("orders in a: %q %v, want n1", m.Name, ok)
	}
	if m, ok := r.owner("orders", 1, "e", nil); ok {
		t.Fatalf("orders in b: got %q, want none (n2 does not serve it)", m.Name)
	}
	if m, ok := r.owner("billing", 1, "e", nil); !ok || m.Name != "n2" {
		t.Fatalf("billing in b: %q %v, want n2", m.Name, ok)
	}
	for _, g := range []int{-1, 2} {
		if _, ok := r.owner("billing", g, "e", nil); ok {
			t.Fatalf("group %d out of range gave an owner", g)
		}
	}
	if _, ok := r.owner("nothing", 0, "e", nil); ok {
		t.Fatal("unknown service gave an owner")
	}
	names := func(ms []Member) (out []string) {
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	if got := names(r.members("orders")); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("Members(orders) = %v, want [n1] (listed once)", got)
	}
	if got := names(r.members("billing")); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Fatalf("Members(billing) = %v, want [n1 n2]", got)
	}
	if got := r.members("nothing"); got != nil {
		t.Fatalf("Members(nothing) = %v", got)
	}
}

func TestRoutingNoAllocs(t *testing.T) {
	groups := []string{"a", "b", "c"}
	r := newRouter(groups)
	r.update(testMembers(groups, 10, "svc"))
	dst := make([]int, 0, len(groups))
	skip := func(name string) bool { return name == "b-node-3" }
	allocs := testing.AllocsPerRun(1000, func() {
		dst = r.groupOrder("account-12345", dst)
		for _, g := range dst {
			if _, ok := r.owner("svc", g, "account-12345", skip); !ok {
				t.Fatal("no owner")
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("GroupOrder+Owner: %v allocs/op, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		k := keyOf("account-12345")
		dst = r.groupOrderKey(k, dst)
		if _, ok := r.ownerKey("svc", dst[0], k, skip); !ok {
			t.Fatal("no owner")
		}
	})
	if allocs != 0 {
		t.Fatalf("GroupOrderKey+OwnerKey: %v allocs/op, want 0", allocs)
	}
}

func TestRoutingConcurrentUpdate(t *testing.T) {
	groups := []string{"a", "b", "c"}
	full := testMembers(groups, 6, "svc")
	r := newRouter(groups)
	r.update(full)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			var order []int
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				e := fmt.Sprintf("e-%d-%d", w, i)
				order = r.groupOrder(e, order)
				for _, g := range order {
					// Every view below keeps at least one member per group.
					if m, ok := r.owner("svc", g, e, nil); !ok || m.Group != groups[g] {
						t.Errorf("Owner(%q, %d) = %+v, %v", e, g, m, ok)
						return
					}
				}
				if len(r.members("svc")) < len(groups) {
					t.Error("Members shrank below one per group")
					return
				}
			}
		})
	}
	for i := range 200 {
		r.update(full[:len(full)-i%5]) // drops up to 4 members of group c
	}
	close(stop)
	wg.Wait()
}

// A member catching up gets no calls while its group has another that
// serves; a group with none else keeps it, so that a client still reaches
// the group (and the node refuses what it cannot serve, for free).
func TestRoutingSkipsCatchingUp(t *testing.T) {
	ms := testMembers([]string{"a", "b"}, 2, "svc")
	ms[0].CatchingUp = true // a-node-0
	ms[2].CatchingUp = true // b-node-0
	ms[3].CatchingUp = true // b-node-1: all of group b
	r := newRouter([]string{"a", "b"})
	r.update(ms)
	for _, e := range entities(200) {
		if m, _ := r.owner("svc", 0, e, nil); m.Name != "a-node-1" {
			t.Fatalf("%s owned by %s in group a, want a-node-1 (a-node-0 catches up)", e, m.Name)
		}
		if m, ok := r.owner("svc", 1, e, nil); !ok || !m.CatchingUp {
			t.Fatalf("%s: group b routes to %v, %v; want one of its catching-up nodes", e, m, ok)
		}
	}
}

// Route is what a client's router answers, one owner per group in the
// entity's order; a group with no member of the service has no entry.
func TestRoute(t *testing.T) {
	groups := []string{"a", "b", "c"}
	ms := testMembers(groups[:2], 3, "svc")
	r := newRouter(groups)
	r.update(ms)
	for _, e := range entities(200) {
		var want []Member
		for _, g := range r.groupOrder(e, nil) {
			if m, ok := r.owner("svc", g, e, nil); ok {
				want = append(want, m)
			}
		}
		got := Route(groups, ms, "svc", e)
		if len(got) != 2 {
			t.Fatalf("Route(%q) = %v, want an owner in a and in b only", e, got)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Route(%q) (-router +Route):\n%s", e, diff)
		}
	}
	if got := Route(groups, ms, "other", "x"); got != nil {
		t.Errorf("Route of a service nobody serves = %v, want none", got)
	}
}
