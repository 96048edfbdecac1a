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

// errNotCarried stands for an error that has no code: one the ledger does
// not return itself, which its memory, journal and snapshots cannot carry.
var errNotCarried = errors.New("bank: error not carried by the snapshot")

// codeOf returns err's code in errorCodes, len(errorCodes) if it has none.
func codeOf(err error) uint8 {
	for i, e := range errorCodes {
		if e == err {
			return uint8(i)
		}
	}
	return uint8(len(errorCodes))
}

// errorOf returns the error of code.
func errorOf(code uint8) error {
	if int(code) < len(errorCodes) {
		return errorCodes[code]
	}
	return errNotCarried
}

// readCode reads an error code, mapping one this ledger does not know to
// the code that has none.
func readCode(r *codec.Reader) uint8 {
	return uint8(min(r.Uvarint(), uint64(len(errorCodes))))
}

// SnapshotState implements runtime.StateTransfer.
func (l *Ledger) SnapshotState() ([]byte, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	// Sized up front: grown by doubling, the buffer of a large ledger
	// was copied some twenty times under the lock.
	size := 16 + 32*len(l.accounts) + 48*l.memory.len() + 32*l.journal.ring.len()
	b := codec.AppendUvarint(make([]byte, 0, size), stateVersion)
	b = codec.AppendUvarint(b, uint64(len(l.accounts)))
	for id, acc := range l.accounts {
		b = codec.AppendString(b, id)
		b = codec.AppendVarint(b, acc.balance)
		b = codec.AppendBool(b, acc.closed)
	}
	b = codec.AppendUvarint(b, uint64(l.memory.len()))
	// Oldest first, so that the restored memory forgets in the same order.
	l.memory.each(func(id [16]byte, o *remembered) {
		b = append(b, id[:]...)
		b = codec.AppendString(b, l.names.list[o.account])
		b = codec.AppendVarint(b, o.amount)
		b = codec.AppendUvarint(b, uint64(o.code))
	})
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
	memory := newIDRing[remembered](max(l.memory.capacity(), int(n)))
	names := newAccountNames()
	for range n {
		var id [16]byte
		copy(id[:], r.Fixed(16))
		o := remembered{account: names.index(r.String()), amount: r.Varint(), code: readCode(&r)}
		if _, dup := memory.get(id); !dup {
			memory.put(id, o)
		}
	}
	applied, rejected, replayed := r.Uvarint(), r.Uvarint(), r.Uvarint()
	j := readJournalState(&r, l.journal.ring.capacity())
	if err := r.Done(); err != nil {
		return fmt.Errorf("bank: snapshot: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accounts, l.memory, l.names = accounts, memory, names
	l.applied, l.rejected, l.replayed = applied, rejected, replayed
	l.journal = j
	return nil
}

// appendState encodes the journal, oldest entry first.
func (j *journal) appendState(b []byte) []byte {
	b = codec.AppendUvarint(b, j.evicted)
	b = codec.AppendUvarint(b, uint64(j.ring.len()))
	j.ring.each(func(id [16]byte, e *journalEntry) {
		b = append(b, id[:]...)
		b = codec.AppendUvarint(b, uint64(e.runs))
		b = codec.AppendVarint(b, e.amount)
		b = codec.AppendUvarint(b, uint64(e.code))
	})
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
		e := journalEntry{runs: uint32(r.Uvarint()), amount: r.Varint(), code: readCode(r)}
		switch old, ok := j.ring.get(id); {
		case j.ring.capacity() == 0:
		case ok:
			old.runs = e.runs
		case j.ring.put(id, e):
			j.evicted++
		}
	}
	return j
}
