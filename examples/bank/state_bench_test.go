package bank

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkSnapshotState takes the state of a ledger as make overload
// leaves it: 100 accounts, a full memory of outcomes and a journal of
// 100,000 writes. The ledger's lock is held for as long as it takes.
func BenchmarkSnapshotState(b *testing.B) {
	ctx := context.Background()
	l := NewLedger(DefaultRemember, WithJournal(800000))
	l.opID = func(ctx context.Context) ([16]byte, bool) {
		id, ok := ctx.Value(opKey{}).([16]byte)
		return id, ok
	}
	for i := range 100 {
		mustOpen(b, l, fmt.Sprintf("acct-%03d", i), 1000)
	}
	for i := range 150000 {
		var id [16]byte
		binary.BigEndian.PutUint64(id[:], uint64(i+1))
		req := DepositRequest{AccountID: fmt.Sprintf("acct-%03d", i%100), Amount: 1}
		if _, err := l.Deposit(context.WithValue(ctx, opKey{}, id), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.SnapshotState(); err != nil {
			b.Fatal(err)
		}
	}
}
