package bank

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// opKey carries a test's operation ID, standing in for the runtime's
// attempt information.
type opKey struct{}

func withOp(ctx context.Context, n byte) context.Context {
	var id [16]byte
	id[0], id[15] = n, 0xff
	return context.WithValue(ctx, opKey{}, id)
}

// newTestLedger returns a ledger that takes operation IDs from withOp.
func newTestLedger(remember int) *Ledger {
	l := NewLedger(remember)
	l.opID = func(ctx context.Context) ([16]byte, bool) {
		id, ok := ctx.Value(opKey{}).([16]byte)
		return id, ok
	}
	return l
}

func mustOpen(t testing.TB, l *Ledger, id string, initial int64) {
	t.Helper()
	if _, err := l.Open(context.Background(), OpenRequest{AccountID: id, Initial: int32(initial)}); err != nil {
		t.Fatalf("Open(%s): %v", id, err)
	}
}

func wantBalance(t *testing.T, l *Ledger, id string, want int64) {
	t.Helper()
	b, err := l.Balance(context.Background(), id)
	if err != nil {
		t.Fatalf("Balance(%s): %v", id, err)
	}
	if b.Amount != want || b.AccountID != id {
		t.Fatalf("Balance(%s) = %+v, want amount %d", id, b, want)
	}
}

func TestLedgerOperations(t *testing.T) {
	ctx := context.Background()
	l := NewLedger(0)
	mustOpen(t, l, "a", 100)
	mustOpen(t, l, "b", 0)

	if b, err := l.Deposit(ctx, DepositRequest{AccountID: "a", Amount: 50}); err != nil || b.Amount != 150 {
		t.Fatalf("Deposit = %+v, %v; want 150", b, err)
	}
	if b, err := l.Withdraw(ctx, WithdrawRequest{AccountID: "a", Amount: 30}); err != nil || b.Amount != 120 {
		t.Fatalf("Withdraw = %+v, %v; want 120", b, err)
	}
	if b, err := l.Transfer(ctx, TransferRequest{From: "a", To: "b", Amount: 20}); err != nil || b != (Balance{"a", 100}) {
		t.Fatalf("Transfer = %+v, %v; want a at 100", b, err)
	}
	wantBalance(t, l, "b", 20)

	errCases := []struct {
		name string
		call func() error
		want error
	}{
		{"open twice", func() error { _, err := l.Open(ctx, OpenRequest{AccountID: "a"}); return err }, ErrAccountExists},
		{"open negative", func() error { _, err := l.Open(ctx, OpenRequest{AccountID: "n", Initial: -1}); return err }, ErrInvalidRequest},
		{"open no id", func() error { _, err := l.Open(ctx, OpenRequest{}); return err }, ErrInvalidRequest},
		{"deposit unknown", func() error { _, err := l.Deposit(ctx, DepositRequest{AccountID: "x", Amount: 1}); return err }, ErrUnknownAccount},
		{"deposit zero", func() error { _, err := l.Deposit(ctx, DepositRequest{AccountID: "a"}); return err }, ErrInvalidRequest},
		{"overdraw", func() error { _, err := l.Withdraw(ctx, WithdrawRequest{AccountID: "b", Amount: 21}); return err }, ErrInsufficientFunds},
		{"transfer overdraw", func() error {
			_, err := l.Transfer(ctx, TransferRequest{From: "b", To: "a", Amount: 21})
			return err
		}, ErrInsufficientFunds},
		{"transfer to self", func() error { _, err := l.Transfer(ctx, TransferRequest{From: "a", To: "a", Amount: 1}); return err }, ErrInvalidRequest},
		{"transfer to unknown", func() error { _, err := l.Transfer(ctx, TransferRequest{From: "a", To: "x", Amount: 1}); return err }, ErrUnknownAccount},
		{"balance unknown", func() error { _, err := l.Balance(ctx, "x"); return err }, ErrUnknownAccount},
		{"close non-empty", func() error { return l.Close(ctx, "a") }, ErrBalanceNotZero},
	}
	for _, c := range errCases {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// Rejected writes change nothing.
	wantBalance(t, l, "a", 100)
	wantBalance(t, l, "b", 20)

	s := l.Snapshot("")
	if want := map[string]int64{"a": 100, "b": 20}; !maps.Equal(s.Balances, want) {
		t.Errorf("Snapshot balances = %v, want %v", s.Balances, want)
	}
	if s.Applied != 5 || s.Rejected != 10 || s.Replayed != 0 {
		t.Errorf("Snapshot counters applied=%d rejected=%d replayed=%d, want 5, 10, 0", s.Applied, s.Rejected, s.Replayed)
	}
}

func TestLedgerClose(t *testing.T) {
	ctx := context.Background()
	l := NewLedger(0)
	mustOpen(t, l, "a", 10)
	mustOpen(t, l, "b", 0)
	if _, err := l.Withdraw(ctx, WithdrawRequest{AccountID: "a", Amount: 10}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx, "a"); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, call := range map[string]func() error{
		"close again": func() error { return l.Close(ctx, "a") },
		"deposit":     func() error { _, err := l.Deposit(ctx, DepositRequest{AccountID: "a", Amount: 1}); return err },
		"transfer in": func() error { _, err := l.Transfer(ctx, TransferRequest{From: "b", To: "a", Amount: 1}); return err },
		"reopen":      func() error { _, err := l.Open(ctx, OpenRequest{AccountID: "a"}); return err },
	} {
		if err := call(); !errors.Is(err, ErrAccountClosed) {
			t.Errorf("%s on a closed account: err = %v, want ErrAccountClosed", name, err)
		}
	}
	wantBalance(t, l, "a", 0)
	if s := l.Snapshot(""); len(s.Closed) != 1 || s.Closed[0] != "a" {
		t.Errorf("Snapshot closed = %v, want [a]", s.Closed)
	}
}

func TestLedgerIdempotent(t *testing.T) {
	l := newTestLedger(0)
	mustOpen(t, l, "a", 100)
	mustOpen(t, l, "b", 0)
	ctx := context.Background()

	dep := withOp(ctx, 1)
	for i := range 3 {
		b, err := l.Deposit(dep, DepositRequest{AccountID: "a", Amount: 5})
		if err != nil || b.Amount != 105 {
			t.Fatalf("Deposit #%d = %+v, %v; want the first answer, 105", i, b, err)
		}
	}
	xfer := withOp(ctx, 2)
	for i := range 2 {
		b, err := l.Transfer(xfer, TransferRequest{From: "a", To: "b", Amount: 100})
		if err != nil || b.Amount != 5 {
			t.Fatalf("Transfer #%d = %+v, %v; want 5", i, b, err)
		}
	}
	// A rejected operation stays rejected when repeated, even once it
	// could succeed: the caller may already have acted on the answer.
	w := withOp(ctx, 3)
	if _, err := l.Withdraw(w, WithdrawRequest{AccountID: "b", Amount: 150}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("Withdraw = %v, want ErrInsufficientFunds", err)
	}
	if _, err := l.Deposit(withOp(ctx, 4), DepositRequest{AccountID: "b", Amount: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Withdraw(w, WithdrawRequest{AccountID: "b", Amount: 150}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("repeated Withdraw = %v, want the remembered ErrInsufficientFunds", err)
	}
	// Calls without an operation ID are separate operations.
	if _, err := l.Deposit(ctx, DepositRequest{AccountID: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Deposit(ctx, DepositRequest{AccountID: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	wantBalance(t, l, "a", 7)
	wantBalance(t, l, "b", 200)
	s := l.Snapshot("")
	if s.Replayed != 4 {
		t.Errorf("replayed = %d, want 4", s.Replayed)
	}
}

func TestLedgerForgetsOldest(t *testing.T) {
	l := newTestLedger(2)
	mustOpen(t, l, "a", 0)
	ctx := context.Background()
	for n := byte(1); n <= 3; n++ {
		if _, err := l.Deposit(withOp(ctx, n), DepositRequest{AccountID: "a", Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// 2 and 3 are remembered; 1 was forgotten and runs again.
	for _, n := range []byte{3, 2, 1} {
		if _, err := l.Deposit(withOp(ctx, n), DepositRequest{AccountID: "a", Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	wantBalance(t, l, "a", 4)
	if s := l.Snapshot(""); s.Replayed != 2 || l.memory.len() != 2 {
		t.Errorf("replayed = %d, remembered = %d; want 2, 2", s.Replayed, l.memory.len())
	}
}

func TestLedgerBusy(t *testing.T) {
	l := NewLedger(0)
	mustOpen(t, l, "a", 10)
	l.SetBusy(true)
	ctx := context.Background()
	// A replicated write applies whatever the node's state: every replica
	// must give it the same result.
	if b, err := l.Deposit(ctx, DepositRequest{AccountID: "a", Amount: 1}); err != nil || b.Amount != 11 {
		t.Errorf("Deposit while busy: %+v, %v; want it applied", b, err)
	}
	if _, err := l.Balance(ctx, "a"); !errors.Is(err, ErrLedgerBusy) {
		t.Errorf("Balance while busy: %v, want ErrLedgerBusy", err)
	}
	if err := l.Close(ctx, "a"); !errors.Is(err, ErrLedgerBusy) {
		t.Errorf("Close while busy: %v, want ErrLedgerBusy", err)
	}
	l.SetBusy(false)
	wantBalance(t, l, "a", 11)
}

func TestLedgerSnapshotPrefix(t *testing.T) {
	l := NewLedger(0)
	mustOpen(t, l, "run1-a", 1)
	mustOpen(t, l, "run2-a", 2)
	s := l.Snapshot("run1-")
	if want := map[string]int64{"run1-a": 1}; !maps.Equal(s.Balances, want) {
		t.Errorf("Snapshot(run1-) = %v, want %v", s.Balances, want)
	}
}

// Concurrent transfers among accounts conserve the total, whatever their
// interleaving (the ledger's lock guards the maps; the server adds order).
func TestLedgerConcurrentConservesMoney(t *testing.T) {
	l := NewLedger(0)
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		mustOpen(t, l, id, 1000)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 500 {
				from, to := ids[(w+i)%4], ids[(w+i+1+i%3)%4]
				l.Transfer(context.Background(), TransferRequest{From: from, To: to, Amount: int64(1 + i%70)})
			}
		})
	}
	wg.Wait()
	var total int64
	for _, v := range l.Snapshot("").Balances {
		if v < 0 {
			t.Fatalf("negative balance %d", v)
		}
		total += v
	}
	if total != 4000 {
		t.Fatalf("total = %d, want 4000", total)
	}
}

// BenchmarkLedgerDeposit measures a keyed write: the lookup of the
// operation ID, the change, and remembering the outcome (evicting the
// oldest once the memory is full).
func BenchmarkLedgerDeposit(b *testing.B) {
	l := newTestLedger(1 << 10)
	if _, err := l.Open(context.Background(), OpenRequest{AccountID: "a"}); err != nil {
		b.Fatal(err)
	}
	req := DepositRequest{AccountID: "a", Amount: 1}
	var id [16]byte
	n := uint64(0)
	for b.Loop() {
		n++
		id[0], id[1], id[2] = byte(n), byte(n>>8), byte(n>>16)
		ctx := context.WithValue(context.Background(), opKey{}, id) // as the server's attempt context
		if _, err := l.Deposit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func TestJournalCountsExecutionsNotReplays(t *testing.T) {
	ctx := context.Background()
	l := newTestLedger(1) // remembers one outcome: the second write evicts the first
	if _, err := l.Open(withOp(ctx, 1), OpenRequest{AccountID: "a", Initial: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Open(withOp(ctx, 1), OpenRequest{AccountID: "a", Initial: 10}); err != nil {
		t.Fatalf("replayed Open: %v", err) // answered from memory, not executed
	}
	if _, err := l.Withdraw(withOp(ctx, 2), WithdrawRequest{AccountID: "a", Amount: 50}); !errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("Withdraw = %v, want ErrInsufficientFunds", err)
	}
	// Op 1 was forgotten by the idempotency memory: it runs again and
	// fails, and the journal counts the second execution.
	if _, err := l.Open(withOp(ctx, 1), OpenRequest{AccountID: "a", Initial: 10}); !errors.Is(err, ErrAccountExists) {
		t.Fatalf("Open after eviction = %v, want ErrAccountExists", err)
	}
	if _, err := l.Deposit(ctx, DepositRequest{AccountID: "a", Amount: 5}); err != nil { // no ID: not journaled
		t.Fatal(err)
	}
	j := l.Journal()
	if j.Capacity != DefaultJournal || j.Evicted != 0 || len(j.Entries) != 2 {
		t.Fatalf("journal = %+v, want two entries", j)
	}
	zeros := strings.Repeat("00", 14)
	want := []JournalEntry{
		{ID: "01" + zeros + "ff", Runs: 2, Amount: 10},
		{ID: "02" + zeros + "ff", Runs: 1, Err: ErrInsufficientFunds.Error()},
	}
	if !slices.Equal(j.Entries, want) {
		t.Fatalf("entries = %+v, want %+v", j.Entries, want)
	}
}

func TestJournalIsBounded(t *testing.T) {
	ctx := context.Background()
	l := NewLedger(0, WithJournal(2))
	l.opID = newTestLedger(0).opID
	mustOpen(t, l, "a", 0)
	for n := range byte(5) {
		if _, err := l.Deposit(withOp(ctx, n), DepositRequest{AccountID: "a", Amount: 1}); err != nil {
			t.Fatal(err)
		}
	}
	j := l.Journal()
	if j.Capacity != 2 || j.Evicted != 3 || len(j.Entries) != 2 || j.Entries[0].Amount != 4 || j.Entries[1].Amount != 5 {
		t.Fatalf("journal = %+v, want the last two of five, three evicted", j)
	}
	off := NewLedger(0, WithJournal(0))
	off.opID = l.opID
	mustOpen(t, off, "a", 0)
	if _, err := off.Deposit(withOp(ctx, 1), DepositRequest{AccountID: "a", Amount: 1}); err != nil {
		t.Fatal(err)
	}
	if j := off.Journal(); j.Capacity != 0 || len(j.Entries) != 0 {
		t.Fatalf("journal off = %+v", j)
	}
}
