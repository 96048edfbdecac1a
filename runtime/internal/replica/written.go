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
type written struct {
	max   int
	byID  map[[16]byte]writtenResult
	order [][16]byte // oldest first; order[head:] are live
	head  int
}

type writtenResult struct {
	index  uint64
	result frame.Result
}

func newWritten(max int) *written {
	return &written{max: max, byID: make(map[[16]byte]writtenResult)}
}

func (w *written) get(id [16]byte) (writtenResult, bool) {
	r, ok := w.byID[id]
	return r, ok
}

func (w *written) put(id [16]byte, index uint64, r frame.Result) {
	if _, ok := w.byID[id]; ok {
		return
	}
	r.Call = 0
	r.Payload = append([]byte(nil), r.Payload...)
	w.byID[id] = writtenResult{index: index, result: r}
	w.order = append(w.order, id)
	for len(w.order)-w.head > w.max {
		delete(w.byID, w.order[w.head])
		w.order[w.head] = [16]byte{}
		w.head++
	}
	// Move the live part down now and then, so the evicted prefix is
	// released.
	if w.head > 1024 && w.head > len(w.order)/2 {
		w.order = append([][16]byte(nil), w.order[w.head:]...)
		w.head = 0
	}
}

func (w *written) len() int { return len(w.order) - w.head }

// each calls f for every entry, oldest first.
func (w *written) each(f func(id [16]byte, r writtenResult)) {
	for _, id := range w.order[w.head:] {
		f(id, w.byID[id])
	}
}
