package runtime

import (
	"fmt"
	"testing"
)

// BenchmarkRouting is one operation's routing on 3 groups of 10 members:
// the group order and the owner in the first group.
func BenchmarkRouting(b *testing.B) {
	groups := []string{"eu-1", "eu-2", "eu-3"}
	r := newRouter(groups)
	r.update(testMembers(groups, 10, "bank.Accounts"))
	ents := make([]string, 1024)
	for i := range ents {
		ents[i] = fmt.Sprintf("account-%d", i)
	}
	dst := make([]int, 0, len(groups))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := ents[i%len(ents)]
		i++
		dst = r.groupOrder(e, dst)
		if _, ok := r.owner("bank.Accounts", dst[0], e, nil); !ok {
			b.Fatal("no owner")
		}
	}
}

// BenchmarkRoutingKey is BenchmarkRouting with the entity hashed once, as
// a client does for an operation.
func BenchmarkRoutingKey(b *testing.B) {
	groups := []string{"eu-1", "eu-2", "eu-3"}
	r := newRouter(groups)
	r.update(testMembers(groups, 10, "bank.Accounts"))
	ents := make([]string, 1024)
	for i := range ents {
		ents[i] = fmt.Sprintf("account-%d", i)
	}
	dst := make([]int, 0, len(groups))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keyOf(ents[i%len(ents)])
		i++
		dst = r.groupOrderKey(k, dst)
		if _, ok := r.ownerKey("bank.Accounts", dst[0], k, nil); !ok {
			b.Fatal("no owner")
		}
	}
}

// BenchmarkRoutingParallel checks that lookups scale across cores while
// the table is read lock-free.
func BenchmarkRoutingParallel(b *testing.B) {
	groups := []string{"eu-1", "eu-2", "eu-3"}
	r := newRouter(groups)
	r.update(testMembers(groups, 10, "bank.Accounts"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]int, 0, len(groups))
		for pb.Next() {
			dst = r.groupOrder("account-42", dst)
			if _, ok := r.owner("bank.Accounts", dst[0], "account-42", nil); !ok {
				b.Fatal("no owner")
			}
		}
	})
}
