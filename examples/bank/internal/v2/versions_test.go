package bank_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"testing/synctest"

	v1 "github.com/ffgen/ffgen/examples/bank"
	v2 "github.com/ffgen/ffgen/examples/bank/internal/v2"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
)

// A cluster in the middle of a rollout, in one process: one voter still
// runs the first version of the bank, the others this one. Writes that
// carry only what that voter holds alike go through from clients of
// either version (a reference as a string or as bytes, an opening
// balance an int32 holds); a transfer that sets the memo this version
// added, or an opening balance past an int32, is refused, typed and not
// executed, naming the voter and the field, and no replica holds any of
// it. Once the voter is upgraded, the gate lets them through.
func TestMixedVersionsInProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fftest.New(t, fftest.Config{PerGroup: 2})
		victim := c.Nodes[len(c.Nodes)/2].Name
		upgraded := map[string]bool{}
		for _, n := range c.Nodes {
			upgraded[n.Name] = n.Name != victim
		}
		ledgers := map[string]*v1.Ledger{}
		c.ServeVersions(t, func(n *fftest.Node) *runtime.ServiceDesc {
			if upgraded[n.Name] {
				return v2.AccountsDesc
			}
			return v1.AccountsDesc
		}, func(n *fftest.Node) any {
			l := v1.NewLedger(0)
			ledgers[n.Name] = l
			if upgraded[n.Name] {
				return v2.Ledger{Ledger: l}
			}
			return l
		})
		for c.Leader(t, v1.AccountsDesc.Name) == victim {
			c.Restart(t, victim)
			c.WaitConverged(t)
		}
		client := c.Client(t)
		old, next := v1.NewAccountsClient(client), v2.NewAccountsClient(client)
		ctx := context.Background()
		equal := func(want map[string]int64) {
			t.Helper()
			c.WaitConverged(t)
			for name, l := range ledgers {
				if got := l.Snapshot("").Balances; !maps.Equal(got, want) {
					t.Errorf("replica %s holds %v, want %v", name, got, want)
				}
			}
		}

		if _, err := next.Open(ctx, v2.OpenRequest{AccountID: "x", Initial: 100}); err != nil {
			t.Fatalf("v2 Open: %v", err)
		}
		if _, err := old.Open(ctx, v1.OpenRequest{AccountID: "y", Initial: 100}); err != nil {
			t.Fatalf("v1 Open: %v", err)
		}
		if _, err := next.Transfer(ctx, v2.TransferRequest{From: "x", To: "y", Amount: 10, Reference: []byte("r1")}); err != nil {
			t.Fatalf("v2 Transfer with a reference, without a memo: %v", err)
		}
		if _, err := old.Transfer(ctx, v1.TransferRequest{From: "y", To: "x", Amount: 5, Reference: "r2"}); err != nil {
			t.Fatalf("v1 Transfer with a reference: %v", err)
		}
		refused := func(what string, err error, want string) {
			t.Helper()
			if !errors.Is(err, runtime.ErrVotersCannotApply) || runtime.MaybeExecuted(err) {
				t.Fatalf("%s with voter %s at v1: %v (maybe executed %v); want ErrVotersCannotApply, not executed",
					what, victim, err, runtime.MaybeExecuted(err))
			}
			if !strings.Contains(err.Error(), "voter "+victim) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name voter %s and %q", what, err, victim, want)
			}
		}
		_, err := next.Transfer(ctx, v2.TransferRequest{From: "x", To: "y", Amount: 1, Memo: "rent"})
		refused("v2 Transfer with a memo", err, "field Memo (5) of TransferRequest")
		_, err = next.Open(ctx, v2.OpenRequest{AccountID: "z", Initial: 5_000_000_000})
		refused("v2 Open of 5000000000", err, "field Initial (2) of OpenRequest, which the write to bank.Accounts.Open carries, with a kind that cannot hold its value 5000000000")
		equal(map[string]int64{"x": 95, "y": 105})

		// The voter is upgraded: the memo reaches every replica's ledger
		// (which does not keep it), and the large opening balance reaches
		// the ledger underneath, which refuses it alike on every replica.
		upgraded[victim] = true
		c.Restart(t, victim)
		c.WaitConverged(t)
		if _, err := next.Transfer(ctx, v2.TransferRequest{From: "x", To: "y", Amount: 1, Memo: "rent"}); err != nil {
			t.Fatalf("v2 Transfer with a memo once every voter runs v2: %v", err)
		}
		if _, err := next.Open(ctx, v2.OpenRequest{AccountID: "z", Initial: 5_000_000_000}); !errors.Is(err, v2.ErrInvalidRequest) {
			t.Fatalf("v2 Open of 5000000000 once every voter runs v2: %v; want the ledger's ErrInvalidRequest", err)
		}
		equal(map[string]int64{"x": 94, "y": 106})
	})
}
