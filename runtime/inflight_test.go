package runtime_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// A listing of the client's operations in flight holds copies: an
// operation that ends and is reused meanwhile does not change what the
// listing says (the race detector sees a listing that shares its
// entities with the reused operation).
func TestInFlightListingOutlivesItsOperations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		synctest.Wait()
		var wg sync.WaitGroup
		var listed []runtime.OpInfo
		for i := range 8 {
			wg.Go(func() {
				for j := range 20 {
					e.ledger.Add(t.Context(), fmt.Sprintf("in%d-%d", i, j), 1)
				}
			})
		}
		wg.Go(func() {
			for range 40 {
				listed = append(listed, e.client.InFlight()...)
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		for _, op := range listed {
			for _, ent := range op.Entities {
				if !strings.HasPrefix(ent, "in") {
					t.Errorf("an operation listed with entity %q", ent)
				}
			}
		}
	})
}
