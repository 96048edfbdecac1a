package runtime

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

func memberNames(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

func TestStaticMembershipViews(t *testing.T) {
	a := Member{Name: "a", Group: "g1", Addr: "a:1", Services: []string{"svc"}}
	b := Member{Name: "b", Group: "g2", Addr: "b:1", Services: []string{"svc"}}
	c := Member{Name: "c", Group: "g1", Addr: "c:1", Services: []string{"svc"}}
	sm := NewStaticMembership(a, b)

	var seen [][]string
	cancel := sm.Subscribe(func(ms []Member) { seen = append(seen, memberNames(ms)) })
	sm.Add(c)
	sm.Add(Member{Name: "a", Group: "g1", Addr: "a:2"}) // replaces a
	sm.Remove("b", "unknown")
	sm.Set([]Member{b})
	cancel()
	sm.Set(nil) // not seen: cancelled

	want := [][]string{{"a", "b"}, {"a", "b", "c"}, {"b", "c", "a"}, {"c", "a"}, {"b"}}
	if !slices.EqualFunc(seen, want, slices.Equal) {
		t.Fatalf("views = %v, want %v", seen, want)
	}
	if got := sm.Members(); len(got) != 0 {
		t.Fatalf("Members() = %v after Set(nil)", got)
	}
}

func TestStaticMembershipCopiesInput(t *testing.T) {
	in := []Member{{Name: "a", Group: "g", Services: []string{"svc"}}}
	sm := NewStaticMembership(in...)
	in[0].Name = "changed"
	in[0].Services[0] = "changed"
	got := sm.Members()
	if got[0].Name != "a" || got[0].Services[0] != "svc" {
		t.Fatalf("the view changed with the caller's slice: %+v", got)
	}
	sm.Set(in)
	in[0].Services[0] = "again"
	if got := sm.Members(); got[0].Services[0] != "changed" {
		t.Fatalf("Set kept the caller's services slice: %+v", got)
	}
}

func TestStaticMembershipCancelFromCallback(t *testing.T) {
	sm := NewStaticMembership()
	calls := 0
	var cancel func()
	cancel = sm.Subscribe(func([]Member) {
		calls++
		if calls == 2 {
			cancel()
		}
	})
	sm.Add(Member{Name: "a"})
	sm.Add(Member{Name: "b"})
	if calls != 2 {
		t.Fatalf("callback called %d times, want 2 (then it cancelled itself)", calls)
	}
}

// TestStaticMembershipRouter drives a router from the membership inside a
// synctest bubble, with concurrent changes: every subscriber sees every
// view in order, one call at a time, and ends on the final view.
func TestStaticMembershipRouter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		groups := []string{"a", "b"}
		all := testMembers(groups, 3, "svc")
		sm := NewStaticMembership()
		r := newRouter(groups)
		defer sm.Subscribe(func(ms []Member) { r.update(ms) })()

		var mu sync.Mutex // guards nothing the callback needs: detects overlap
		var sizes []int
		defer sm.Subscribe(func(ms []Member) {
			if !mu.TryLock() {
				t.Error("overlapping calls to one subscriber")
				return
			}
			sizes = append(sizes, len(ms))
			mu.Unlock()
		})()

		var wg sync.WaitGroup
		for _, m := range all {
			wg.Go(func() { sm.Add(m) })
		}
		wg.Wait()
		if len(sizes) != len(all)+1 {
			t.Fatalf("subscriber saw %d views, want %d", len(sizes), len(all)+1)
		}
		for i, n := range sizes {
			if n != i {
				t.Fatalf("views of sizes %v, want 0..%d in order", sizes, len(all))
			}
		}
		if got, want := memberNames(r.members("svc")), memberNames(testMembers(groups, 3)); !slices.Equal(got, want) {
			t.Fatalf("router members = %v, want %v", got, want)
		}
		sm.Remove("a-node-0", "a-node-1", "a-node-2")
		if _, ok := r.owner("svc", 0, "e", nil); ok {
			t.Fatal("group a still has an owner after all its members left")
		}
	})
}
