package runtime

// replicaLog is a service's bounded log: the entries after base, in index
// order, and an index by operation ID so that a repeated attempt of a
// logged write joins it or is answered with its result instead of being
// sequenced again. Entries at or below base are in the state (applied, or
// received in a snapshot) and no longer replayable from here.
type replicaLog struct {
	base    uint64
	baseEp  epoch
	entries []*entry
	byOp    map[[16]byte]*entry
}

func (l *replicaLog) init() { l.byOp = make(map[[16]byte]*entry) }

func (l *replicaLog) last() uint64 { return l.base + uint64(len(l.entries)) }

// at returns the entry at index i, or nil outside (base, last].
func (l *replicaLog) at(i uint64) *entry {
	if i <= l.base || i > l.last() {
		return nil
	}
	return l.entries[i-l.base-1]
}

// epochAt is the epoch of the entry at i; base's for i == base. ok is false
// below base or past the end.
func (l *replicaLog) epochAt(i uint64) (epoch, bool) {
	if i == l.base {
		return l.baseEp, true
	}
	if e := l.at(i); e != nil {
		return e.epoch, true
	}
	return epoch{}, false
}

func (l *replicaLog) lastEpoch() epoch {
	ep, _ := l.epochAt(l.last())
	return ep
}

func (l *replicaLog) append(e *entry) {
	l.entries = append(l.entries, e)
	l.byOp[e.opID] = e
}

// truncate drops the entries from index i on. Only entries that never ran
// here may be dropped; the callers check.
func (l *replicaLog) truncate(i uint64) []*entry {
	if i <= l.base || i > l.last() {
		return nil
	}
	cut := l.entries[i-l.base-1:]
	for _, e := range cut {
		if l.byOp[e.opID] == e {
			delete(l.byOp, e.opID)
		}
	}
	dropped := append([]*entry(nil), cut...)
	clear(cut)
	l.entries = l.entries[:i-l.base-1]
	return dropped
}

// after returns up to max entries after index i, bounded to about maxBytes
// of payload, or ok false when i is below base (the entries are gone).
func (l *replicaLog) after(i uint64, max, maxBytes int) (out []*entry, ok bool) {
	if i < l.base {
		return nil, false
	}
	size := 0
	for j := i + 1; j <= l.last() && len(out) < max; j++ {
		e := l.at(j)
		size += len(e.payload) + len(e.result.Payload) + 64
		if size > maxBytes && len(out) > 0 {
			break
		}
		out = append(out, e)
	}
	return out, true
}

// trim forgets the oldest entries beyond keep, but never one at or above
// upTo (not yet applied everywhere it matters).
func (l *replicaLog) trim(keep int, upTo uint64) {
	n := len(l.entries) - keep
	for n > 0 && l.base+1 < upTo {
		e := l.entries[0]
		if l.byOp[e.opID] == e {
			delete(l.byOp, e.opID)
		}
		l.base, l.baseEp = e.index, e.epoch
		l.entries[0] = nil
		l.entries = l.entries[1:]
		n--
	}
	// Re-slice into a fresh array now and then, so that the dropped
	// prefix is released.
	if cap(l.entries) > 2*keep+1024 && len(l.entries) < cap(l.entries)/2 {
		l.entries = append([]*entry(nil), l.entries...)
	}
}

// reset replaces the log: after a snapshot, the state covers up to base.
func (l *replicaLog) reset(base uint64, baseEp epoch) {
	l.base, l.baseEp = base, baseEp
	l.entries = nil
	l.byOp = make(map[[16]byte]*entry)
}
