package bank

// idRing is a bounded table of records keyed by operation ID, in the order
// they were put, that forgets the oldest once full: the ledger's memory of
// outcomes and its journal are each one. A record holds no pointers (R must
// not), and neither does the index, so that the collector has nothing to
// walk in tables of a million entries, and a snapshot writes one out in a
// single pass over a slice, without a lookup per entry: a ledger's
// snapshot holds its lock, and every call waits meanwhile.
type idRing[R any] struct {
	at   map[[16]byte]int32 // where each ID's record is in recs
	recs []idRecord[R]      // oldest at next once full
	next int
}

type idRecord[R any] struct {
	id  [16]byte
	rec R
}

// newIDRing returns a ring that holds capacity records.
func newIDRing[R any](capacity int) idRing[R] {
	return idRing[R]{
		at:   make(map[[16]byte]int32, min(capacity, 1<<17)),
		recs: make([]idRecord[R], 0, capacity),
	}
}

// get returns id's record, to read or change in place.
func (r *idRing[R]) get(id [16]byte) (*R, bool) {
	i, ok := r.at[id]
	if !ok {
		return nil, false
	}
	return &r.recs[i].rec, true
}

// put adds a record for id, which must not have one, and reports whether
// the oldest was forgotten to make room.
func (r *idRing[R]) put(id [16]byte, rec R) (evicted bool) {
	if len(r.recs) < cap(r.recs) {
		r.at[id] = int32(len(r.recs))
		r.recs = append(r.recs, idRecord[R]{id, rec})
		return false
	}
	delete(r.at, r.recs[r.next].id)
	r.recs[r.next] = idRecord[R]{id, rec}
	r.at[id] = int32(r.next)
	r.next = (r.next + 1) % len(r.recs)
	return true
}

// each calls f for every record, oldest first.
func (r *idRing[R]) each(f func(id [16]byte, rec *R)) {
	for i := range r.recs {
		x := &r.recs[(r.next+i)%len(r.recs)]
		f(x.id, &x.rec)
	}
}

func (r *idRing[R]) len() int { return len(r.recs) }

// capacity is how many records the ring holds at most.
func (r *idRing[R]) capacity() int { return cap(r.recs) }
