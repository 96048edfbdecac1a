package replica

import (
	"github.com/ffgen/ffgen/internal/frame"
)

// written is the operation-ID → result table: replicated state, changed
// only by apply, in log order, so that every replica holds the same table
// at the same index. A write whose ID is in it is not run again; its
// caller gets the recorded result, on any node, before or after a leader
// change, a restart from a snapshot or a snapshot install. It keeps the
// newest max IDs: a retry that comes after max other writes runs again.
//
// The results are kept in a slice in the order they were written, with an
// index from ID to position: a snapshot, which the apply loop takes while
// no write is applied, walks the slice instead of looking every ID up.
type written struct {
	max  int
	at   map[[16]byte]int32 // where each ID's entry is in ents
	ents []writtenEntry     // oldest at next once max are kept
	next int
}

type writtenEntry struct {
	id [16]byte
	writtenResult
}

type writtenResult struct {
	index  uint64
	result frame.Result
}

func newWritten(max int) *written {
	return &written{max: max, at: make(map[[16]byte]int32)}
}

func (w *written) get(id [16]byte) (writtenResult, bool) {
	i, ok := w.at[id]
	if !ok {
		return writtenResult{}, false
	}
	return w.ents[i].writtenResult, true
}

func (w *written) put(id [16]byte, index uint64, r frame.Result) {
	if _, ok := w.at[id]; ok || w.max <= 0 {
		return
	}
	r.Call = 0
	r.Payload = append([]byte(nil), r.Payload...)
	e := writtenEntry{id, writtenResult{index: index, result: r}}
	if len(w.ents) < w.max {
		w.at[id] = int32(len(w.ents))
		w.ents = append(w.ents, e)
		return
	}
	delete(w.at, w.ents[w.next].id)
	w.ents[w.next] = e
	w.at[id] = int32(w.next)
	w.next = (w.next + 1) % len(w.ents)
}

func (w *written) len() int { return len(w.ents) }

// each calls f for every entry, oldest first.
func (w *written) each(f func(id [16]byte, r writtenResult)) {
	for i := range w.ents {
		e := &w.ents[(w.next+i)%len(w.ents)]
		f(e.id, e.writtenResult)
	}
}
