package golden

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	v1 "github.com/ffgen/ffgen/internal/golden/testdata/evolve_v1"
	v2 "github.com/ffgen/ffgen/internal/golden/testdata/evolve_v2"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// The two versions of one service, orders.Orders, each serving a cluster
// that the other version's generated client calls: every change of the
// schema's evolution, in both directions, over the whole stack.

// orders1 serves version 1: Place records the order it got and answers a
// receipt; Get answers the order set with give.
type orders1 struct {
	mu   sync.Mutex
	got  []v1.Order
	give v1.Order
}

func (o *orders1) Place(_ context.Context, ord v1.Order) (v1.Receipt, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, ord)
	return v1.Receipt{ID: ord.ID, Total: int64(ord.Qty) * 10}, nil
}

func (o *orders1) Get(context.Context, string) (v1.Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.give, nil
}

func (o *orders1) placed() []v1.Order {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// orders2 serves version 2; Place answers err when it is set.
type orders2 struct {
	mu   sync.Mutex
	got  []v2.Order
	give v2.Order
	err  error
}

func (o *orders2) Place(_ context.Context, ord v2.Order) (v2.Receipt, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, ord)
	if o.err != nil {
		return v2.Receipt{}, o.err
	}
	return v2.Receipt{ID: ord.ID, Total: ord.Qty * 10, Lines: map[string]int64{"widget": ord.Qty}}, nil
}

func (o *orders2) Get(context.Context, string) (v2.Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.give, nil
}

func (o *orders2) Count(context.Context, string) (int64, error) { return 1, nil }

func TestEvolveOldClientNewServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{})
		impl := &orders2{}
		c.Serve(t, v2.OrdersDesc, func(*fftest.Node) any { return impl })
		client := v1.NewOrdersClient(c.Client(t))
		synctest.Wait()

		// A removed field (Note) is skipped; fields the client does not
		// know are zero; widened fields carry the value exactly.
		r, err := client.Place(t.Context(), v1.Order{ID: "o1", Qty: 7, Note: "gift", Price: 2.5, Data: "abc"})
		if err != nil || r != (v1.Receipt{ID: "o1", Total: 70}) {
			t.Fatalf("Place = %+v, %v; want {o1 70}, nil (the new result field skipped)", r, err)
		}
		want := v2.Order{ID: "o1", Qty: 7, Price: 2.5, Data: []byte("abc")}
		if got := impl.got; len(got) != 1 || got[0].ID != want.ID || got[0].Qty != want.Qty || got[0].Price != want.Price ||
			string(got[0].Data) != "abc" || got[0].Tags != nil || got[0].Rush {
			t.Fatalf("the new server got %+v, want %+v", got, want)
		}

		// A value that does not fit the old field is refused, naming the
		// field, never wrapped.
		for _, qty := range []int64{5_000_000_000, -4_294_967_295} {
			impl.give = v2.Order{ID: "o2", Qty: qty}
			got, err := client.Get(t.Context(), "o2")
			var re *codec.RangeError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "Qty") {
				t.Fatalf("Get of Qty %d = %+v, %v; want a *codec.RangeError naming Qty", qty, got, err)
			}
		}
		impl.give = v2.Order{ID: "o3", Price: 0.1}
		if _, err := client.Get(t.Context(), "o3"); err == nil || !strings.Contains(err.Error(), "Price") {
			t.Fatalf("Get of a float64 a float32 cannot hold: %v, want an error naming Price", err)
		}
		impl.give = v2.Order{ID: "o4", Qty: 1 << 30, Price: 0.5, Tags: []string{"x"}, Rush: true}
		if got, err := client.Get(t.Context(), "o4"); err != nil || got != (v1.Order{ID: "o4", Qty: 1 << 30, Price: 0.5}) {
			t.Fatalf("Get = %+v, %v; want the fields v1 knows", got, err)
		}

		// A declared error the old client does not know is a typed
		// *RemoteError carrying its code.
		impl.err = v2.ErrBackordered
		_, err = client.Place(t.Context(), v1.Order{ID: "o5", Qty: 1})
		var remote *runtime.RemoteError
		if !errors.As(err, &remote) || remote.Code != "ErrBackordered" {
			t.Fatalf("Place = %v; want a *runtime.RemoteError with code ErrBackordered", err)
		}
	})
}

func TestEvolveNewClientOldServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{})
		impls := map[string]*orders1{}
		c.Serve(t, v1.OrdersDesc, func(n *fftest.Node) any {
			impls[n.Name] = &orders1{}
			return impls[n.Name]
		})
		client := v2.NewOrdersClient(c.Client(t))
		synctest.Wait()
		placed := func() []v1.Order {
			var all []v1.Order
			for _, name := range slices.Sorted(maps.Keys(impls)) {
				all = append(all, impls[name].placed()...)
			}
			return all
		}

		r, err := client.Place(t.Context(), v2.Order{ID: "o1", Tags: []string{"a"}, Qty: 7, Price: 2.5, Data: []byte("abc"), Rush: true})
		if err != nil || r.ID != "o1" || r.Total != 70 || r.Lines != nil {
			t.Fatalf("Place = %+v, %v; want {o1 70 nil}", r, err)
		}
		if got := placed(); !slices.Equal(got, []v1.Order{{ID: "o1", Qty: 7, Price: 2.5, Data: "abc"}}) {
			t.Fatalf("the old server got %+v", got)
		}

		// Values the old server cannot hold are refused before its handler
		// runs, naming the field, and the caller is told nothing ran.
		for _, o := range []v2.Order{{ID: "o2", Qty: 5_000_000_000}, {ID: "o3", Qty: -4_294_967_295}, {ID: "o4", Price: 0.1}} {
			_, err := client.Place(t.Context(), o)
			if err == nil || runtime.MaybeExecuted(err) {
				t.Fatalf("Place(%+v) = %v; want an error, not executed", o, err)
			}
			if !strings.Contains(err.Error(), "does not fit") {
				t.Errorf("Place(%+v) = %v; want the field that does not fit named", o, err)
			}
		}
		if got := placed(); len(got) != 1 {
			t.Fatalf("the old server ran Place for values it cannot hold: %+v", got)
		}

		// A method the old server does not have: a typed error, nothing
		// ran, and no failover spent on it.
		_, err = client.Count(t.Context(), "o1")
		if !errors.Is(err, runtime.ErrUnimplemented) || runtime.MaybeExecuted(err) {
			t.Fatalf("Count = %v; want ErrUnimplemented, not executed", err)
		}
		var fe *runtime.Error
		if errors.As(err, &fe) {
			for _, h := range fe.History {
				if h.Reason != runtime.ReasonRefused && h.Reason != runtime.ReasonNone {
					t.Errorf("attempt %d ended %s, want refused", h.Number, h.Reason)
				}
			}
		}
	})
}
