package bank

import (
	"errors"
	"fmt"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
)

// The ledger is a runtime.StateTransfer: a node restarted empty, or one
// that fell further behind than its peers' logs reach, copies a peer's
// ledger. The copy holds the accounts and the remembered outcomes, so that
// an operation repeated after the copy is still answered, not applied again,
// and the journal, so that an audit of the copy finds the writes before it.
var _ runtime.StateTransfer = (*Ledger)(nil)

// stateVersion prefixes every snapshot, so that a node refuses a snapshot
// from a version of the ledger that it cannot read.
const stateVersion = 2

// errorCodes are the errors a remembered outcome can hold, by wire code.
var errorCodes = []error{nil, ErrInsufficientFunds, ErrUnknownAccount, ErrAccountClosed,
	ErrAccountExists, ErrBalanceNotZero, ErrInvalidRequest, ErrLedgerBusy}

func codeOf(err error) uint64 {
	for i, e := range errorCodes {
		if e == err {
			return uint64(i)
		}
	}
	return uint64(len(errorCodes)) // an error the ledger does not return itself
}

// SnapshotState implements runtime.StateTransfer.
func (l *Ledger) SnapshotState() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := codec.AppendUvarint(nil, stateVersion)
	b = codec.AppendUvarint(b, uint64(len(l.accounts)))
	for id, acc := range l.accounts {
		b = codec.AppendString(b, id)
		b = codec.AppendVarint(b, acc.balance)
		b = codec.AppendBool(b, acc.closed)
	}
	b = codec.AppendUvarint(b, uint64(len(l.ring)))
	// Oldest first, so that the restored ring forgets in the same order.
	for i := range l.ring {
		id := l.ring[(l.next+i)%len(l.ring)]
		o := l.seen[id]
		b = append(b, id[:]...)
		b = codec.AppendString(b, o.bal.AccountID)
		b = codec.AppendVarint(b, o.bal.Amount)
		b = codec.AppendUvarint(b, codeOf(o.err))
	}
	b = codec.AppendUvarint(b, l.applied)
	b = codec.AppendUvarint(b, l.rejected)
	b = codec.AppendUvarint(b, l.replayed)
	return l.journal.appendState(b), nil
}

// RestoreState implements runtime.StateTransfer.
func (l *Ledger) RestoreState(state []byte) error {
	r := codec.NewReader(state)
	if v := r.Uvarint(); v != stateVersion {
		return fmt.Errorf("bank: snapshot version %d, this ledger reads %d", v, stateVersion)
	}
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		return errors.New("bank: snapshot: bad account count")
	}
	accounts := make(map[string]*account, n)
	for range n {
		id := r.String()
		accounts[id] = &account{balance: r.Varint(), closed: r.Bool()}
	}
	n = r.Uvarint()
	if n > uint64(r.Len()) {
		return errors.New("bank: snapshot: bad outcome count")
	}
	capacity := max(cap(l.ring), int(n))
	seen := make(map[[16]byte]outcome, capacity)
	ring := make([][16]byte, 0, capacity)
	for range n {
		var id [16]byte
		copy(id[:], r.Fixed(16))
		o := outcome{bal: Balance{AccountID: r.String(), Amount: r.Varint()}}
		if c := r.Uvarint(); c < uint64(len(errorCodes)) {
			o.err = errorCodes[c]
		} else {
			o.err = errors.New("bank: error not carried by the snapshot")
		}
		seen[id] = o
		ring = append(ring, id)
	}
	applied, rejected, replayed := r.Uvarint(), r.Uvarint(), r.Uvarint()
	j := readJournalState(&r, cap(l.journal.ring))
	if err := r.Done(); err != nil {
		return fmt.Errorf("bank: snapshot: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accounts, l.seen, l.ring, l.next = accounts, seen, ring, 0
	l.applied, l.rejected, l.replayed = applied, rejected, replayed
	l.journal = j
	return nil
}

// appendState encodes the journal, oldest entry first.
func (j *journal) appendState(b []byte) []byte {
	b = codec.AppendUvarint(b, j.evicted)
	b = codec.AppendUvarint(b, uint64(len(j.ring)))
	for i := range j.ring {
		id := j.ring[(j.next+i)%len(j.ring)]
		e := j.entries[id]
		b = append(b, id[:]...)
		b = codec.AppendUvarint(b, uint64(e.runs))
		b = codec.AppendVarint(b, e.amount)
		b = codec.AppendUvarint(b, codeOf(e.err))
	}
	return b
}

// readJournalState decodes a journal into one of this node's capacity,
// keeping the newest entries if the copy holds more.
func readJournalState(r *codec.Reader, capacity int) *journal {
	j := newJournal(capacity)
	j.evicted = r.Uvarint()
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		r.Fail(errors.New("bad journal length"))
		return j
	}
	for range n {
		var id [16]byte
		copy(id[:], r.Fixed(16))
		runs, amount, code := r.Uvarint(), r.Varint(), r.Uvarint()
		var err error
		if code < uint64(len(errorCodes)) {
			err = errorCodes[code]
		} else {
			err = errors.New("bank: error not carried by the snapshot")
		}
		j.record(id, Balance{Amount: amount}, err)
		if e := j.entries[id]; e.runs != uint32(runs) {
			e.runs = uint32(runs)
			j.entries[id] = e
		}
	}
	return j
}
