package bank

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
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

// A snapshot holds the ledger's lock, and every call waits meanwhile: it
// is one pass into one buffer, sized up front.
func TestSnapshotStateAllocatesOnce(t *testing.T) {
	ctx := context.Background()
	l := NewLedger(1000, WithJournal(1000))
	l.opID = func(ctx context.Context) ([16]byte, bool) {
		id, ok := ctx.Value(opKey{}).([16]byte)
		return id, ok
	}
	for i := range 10 {
		mustOpen(t, l, string(rune('a'+i)), 100)
	}
	for i := range 1500 { // past both capacities: the rings have wrapped
		req := DepositRequest{AccountID: string(rune('a' + i%10)), Amount: 1}
		var id [16]byte
		binary.BigEndian.PutUint64(id[:], uint64(i+1))
		if _, err := l.Deposit(context.WithValue(ctx, opKey{}, id), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.Journal(); len(got.Entries) != 1000 || got.Evicted != 500 {
		t.Fatalf("journal holds %d entries, %d evicted; want 1000, 500", len(got.Entries), got.Evicted)
	}
	if n := testing.AllocsPerRun(5, func() { l.SnapshotState() }); n != 1 {
		t.Errorf("SnapshotState allocated %v times, want 1", n)
	}
}

// The ledger's memory of outcomes and its journal hold up to a million
// records each: records without pointers leave the collector nothing to
// walk in them.
func TestLedgerTablesHoldNoPointers(t *testing.T) {
	for _, typ := range []reflect.Type{
		reflect.TypeFor[idRecord[remembered]](),
		reflect.TypeFor[idRecord[journalEntry]](),
		reflect.TypeFor[map[[16]byte]int32](),
	} {
		if typ.Kind() == reflect.Map {
			typ = reflect.StructOf([]reflect.StructField{{Name: "K", Type: typ.Key()}, {Name: "V", Type: typ.Elem()}})
		}
		if p := pointerIn(typ); p != "" {
			t.Errorf("%v holds a pointer: %s", typ, p)
		}
	}
}

// pointerIn names a field of typ that holds a pointer, "" if none does.
func pointerIn(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.Struct:
		for i := range typ.NumField() {
			if p := pointerIn(typ.Field(i).Type); p != "" {
				return typ.Field(i).Name + "." + p
			}
		}
		return ""
	case reflect.Array:
		return pointerIn(typ.Elem())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	}
	return typ.Kind().String()
}
