package bank

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A ledger restored from another's snapshot holds the same accounts, the
// same journal, and answers an operation the other already ran from memory
// instead of applying it again.
func TestStateTransferRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := newTestLedger(4)
	mustOpen(t, src, "a", 10)
	mustOpen(t, src, "z", 0)
	if _, err := src.Deposit(withOp(ctx, 1), DepositRequest{AccountID: "a", Amount: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Withdraw(withOp(ctx, 2), WithdrawRequest{AccountID: "a", Amount: 100}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("Withdraw = %v, want ErrInsufficientFunds", err)
	}
	if err := src.Close(withOp(ctx, 3), "z"); err != nil {
		t.Fatal(err)
	}
	state, err := src.SnapshotState()
	if err != nil {
		t.Fatal(err)
	}
	dst := newTestLedger(4)
	mustOpen(t, dst, "stale", 1) // replaced, not merged
	if err := dst.RestoreState(state); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(src.Snapshot(""), dst.Snapshot("")); diff != "" {
		t.Errorf("restored ledger differs (-src +dst):\n%s", diff)
	}
	if diff := cmp.Diff(src.Journal(), dst.Journal()); diff != "" {
		t.Errorf("restored journal differs (-src +dst):\n%s", diff)
	}
	// Operation 1 again: answered from the copied memory, not applied.
	if b, err := dst.Deposit(withOp(ctx, 1), DepositRequest{AccountID: "a", Amount: 5}); err != nil || b.Amount != 15 {
		t.Fatalf("repeated Deposit = %+v, %v; want the remembered 15", b, err)
	}
	if _, err := dst.Withdraw(withOp(ctx, 2), WithdrawRequest{AccountID: "a", Amount: 100}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("repeated Withdraw = %v, want the remembered ErrInsufficientFunds", err)
	}
	wantBalance(t, dst, "a", 15)
}

func TestRestoreRefusesBadState(t *testing.T) {
	l := newTestLedger(4)
	mustOpen(t, l, "a", 1)
	for _, state := range [][]byte{nil, {9}, {stateVersion, 200}} {
		if err := l.RestoreState(state); err == nil {
			t.Errorf("RestoreState(%x) = nil, want an error", state)
		}
	}
	wantBalance(t, l, "a", 1) // a refused snapshot changes nothing
}
