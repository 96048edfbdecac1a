package bank

import (
	"bytes"
	"encoding/hex"
	"slices"
)

// DefaultJournal is how many operations a Ledger's journal holds by
// default: at about 75 bytes an entry (measured), some 10 MiB once full.
const DefaultJournal = 1 << 17

// journal records every write a ledger executed, by operation ID: how many
// times it ran and what its first run answered. It is an audit record, not
// the idempotency memory: a write answered from memory is not executed and
// not journaled, so an ID counted twice means the ledger really applied the
// operation twice (its idempotency memory had forgotten it). The journal is
// bounded: past its capacity it forgets the oldest ID and counts the
// eviction, so an audit knows when an ID's absence proves nothing.
// A ledger brought up to date from another node's state must take that
// node's journal along, or an audit finds the writes before it missing.
type journal struct {
	ring    idRing[journalEntry]
	evicted uint64
}

type journalEntry struct {
	runs   uint32
	code   uint8 // the error its first run answered (errorCodes)
	amount int64 // the balance the first run answered
}

func newJournal(capacity int) *journal {
	return &journal{ring: newIDRing[journalEntry](capacity)}
}

// record notes one execution of id. Called with the ledger's lock held.
func (j *journal) record(id [16]byte, bal Balance, err error) {
	if j.ring.capacity() == 0 {
		return
	}
	if e, ok := j.ring.get(id); ok {
		e.runs++
		return
	}
	if j.ring.put(id, journalEntry{runs: 1, code: codeOf(err), amount: bal.Amount}) {
		j.evicted++
	}
}

// Journal is a ledger's record of the writes it executed, for audits.
type Journal struct {
	Capacity int            `json:"capacity"` // entries it holds at most; 0: journal off
	Evicted  uint64         `json:"evicted"`  // entries forgotten to stay within capacity
	Entries  []JournalEntry `json:"entries"`  // sorted by ID
}

// JournalEntry is one operation the ledger executed.
type JournalEntry struct {
	ID     string `json:"id"`            // the operation ID in hex, as runtime.AttemptInfo.OpIDString
	Runs   uint32 `json:"runs"`          // times executed; more than 1 is a write applied twice
	Amount int64  `json:"amount"`        // the balance its first run answered
	Err    string `json:"err,omitempty"` // the error its first run answered, "" if none
}

// Journal returns the ledger's journal, taken at one instant. Only the
// copy holds the ledger's lock; sorting and formatting do not.
func (l *Ledger) Journal() Journal {
	type kv struct {
		id [16]byte
		e  journalEntry
	}
	l.mu.RLock()
	j := l.journal
	out := Journal{Capacity: j.ring.capacity(), Evicted: j.evicted}
	all := make([]kv, 0, j.ring.len())
	j.ring.each(func(id [16]byte, e *journalEntry) { all = append(all, kv{id, *e}) })
	l.mu.RUnlock()
	slices.SortFunc(all, func(a, b kv) int { return bytes.Compare(a.id[:], b.id[:]) })
	out.Entries = make([]JournalEntry, len(all))
	for i, x := range all {
		out.Entries[i] = JournalEntry{ID: hex.EncodeToString(x.id[:]), Runs: x.e.runs, Amount: x.e.amount}
		if err := errorOf(x.e.code); err != nil {
			out.Entries[i].Err = err.Error()
		}
	}
	return out
}
