package bank

import (
	"bytes"
	"encoding/hex"
	"slices"
)

// DefaultJournal is how many operations a Ledger's journal holds by
// default: at about 130 bytes an entry (measured), some 16 MiB once full.
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
	entries map[[16]byte]journalEntry
	ring    [][16]byte // oldest at next once full
	next    int
	evicted uint64
}

type journalEntry struct {
	runs   uint32
	amount int64 // the balance the first run answered
	err    error // the error it answered
}

func newJournal(capacity int) *journal {
	return &journal{entries: make(map[[16]byte]journalEntry), ring: make([][16]byte, 0, capacity)}
}

// record notes one execution of id. Called with the ledger's lock held.
func (j *journal) record(id [16]byte, bal Balance, err error) {
	if cap(j.ring) == 0 {
		return
	}
	if e, ok := j.entries[id]; ok {
		e.runs++
		j.entries[id] = e
		return
	}
	if len(j.ring) < cap(j.ring) {
		j.ring = append(j.ring, id)
	} else {
		delete(j.entries, j.ring[j.next])
		j.ring[j.next] = id
		j.next = (j.next + 1) % len(j.ring)
		j.evicted++
	}
	j.entries[id] = journalEntry{runs: 1, amount: bal.Amount, err: err}
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
	l.mu.Lock()
	j := l.journal
	out := Journal{Capacity: cap(j.ring), Evicted: j.evicted}
	all := make([]kv, 0, len(j.entries))
	for id, e := range j.entries {
		all = append(all, kv{id, e})
	}
	l.mu.Unlock()
	slices.SortFunc(all, func(a, b kv) int { return bytes.Compare(a.id[:], b.id[:]) })
	out.Entries = make([]JournalEntry, len(all))
	for i, x := range all {
		out.Entries[i] = JournalEntry{ID: hex.EncodeToString(x.id[:]), Runs: x.e.runs, Amount: x.e.amount}
		if x.e.err != nil {
			out.Entries[i].Err = x.e.err.Error()
		}
	}
	return out
}
