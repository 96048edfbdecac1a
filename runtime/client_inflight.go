package runtime

import (
	"sync"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// legTable is the client's record of what is in flight: the legs by call
// number, which the connections' read goroutines look up for every result
// and every heartbeat item, and the operations, for InFlight. It is split
// into shards with a lock each, so that callers starting and ending
// attempts and the read goroutines delivering to them seldom wait for one
// another, and a heartbeat that names 10,000 calls never holds a lock that
// a call needs for longer than one lookup.
type legTable struct {
	shards  [legShards]legShard
	watches sync.Map // transport.Conn → *connWatch, for connections with legs; safe on its own
}

const legShards = 32

type legShard struct {
	mu   sync.Mutex      // guards the following, and the fields of leg and operation that say so
	legs map[uint64]*leg // by call number
	ops  *operation      // linked by trackPrev and trackNext: a map's hashing cost every call more than two stores
	_    [40]byte        // a cache line each: shards locked on different cores do not contend
}

func (t *legTable) init() {
	for i := range t.shards {
		t.shards[i].legs = make(map[uint64]*leg)
	}
}

func (t *legTable) shard(call uint64) *legShard { return &t.shards[call%legShards] }

func (t *legTable) add(l *leg) {
	sh := t.shard(l.call)
	sh.mu.Lock()
	sh.legs[l.call] = l
	l.expect()
	t.watchConn(l)
	sh.mu.Unlock()
}

// remove forgets l: after it returns, nothing is delivered to l.
func (t *legTable) remove(l *leg) {
	sh := t.shard(l.call)
	sh.mu.Lock()
	delete(sh.legs, l.call)
	l.settle()
	l.unwatchConn()
	sh.mu.Unlock()
}

// moveTo makes l wait on conn: events from its old connection are ignored.
func (t *legTable) moveTo(l *leg, conn transport.Conn) {
	sh := t.shard(l.call)
	sh.mu.Lock()
	l.settle()
	l.unwatchConn()
	l.conn = conn
	l.named.Store(false) // the new node has not heard of it yet
	l.expect()
	t.watchConn(l)
	sh.mu.Unlock()
}

// expect tells l's connection, if callers read it, that an answer is
// awaited on it: its read goroutine keeps reading until it came.
// Called with l's shard locked.
func (l *leg) expect() {
	if rc, ok := l.conn.(conncap.CallerReadConn); ok {
		rc.Expect(1)
		l.reads = rc
	}
}

// settle tells l's connection that l awaits nothing more from it: l has
// its event, or gave up. Called with l's shard locked, before the event
// is sent, so that a caller reading for l sees it settled once it sees the
// event.
func (l *leg) settle() {
	if l.reads != nil {
		l.reads.Expect(-1)
		l.reads = nil
	}
}

// deliverResult copies f into its leg, if the leg still waits on conn for
// a result, and wakes the leg's owner.
func (t *legTable) deliverResult(conn transport.Conn, f *frame.Result) {
	sh := t.shard(f.Call)
	sh.mu.Lock()
	if l := sh.legs[f.Call]; l != nil && l.conn == conn && !l.answered && len(l.done) == 0 {
		l.answered = true
		l.acked.Store(true)
		l.settle()
		// Sent under the lock, as every event is, so the buffer of one
		// always has room, and a waiter that gives up (and forgets the
		// leg, also under the lock) either sees the event or is seen.
		l.done <- legEvent{conn: conn, result: l.res.own(f)}
	}
	sh.mu.Unlock()
}

// deliver hands ev to the leg of call, if it still waits on conn.
func (t *legTable) deliver(conn transport.Conn, call uint64, ev legEvent) {
	sh := t.shard(call)
	sh.mu.Lock()
	if l := sh.legs[call]; l != nil && l.conn == conn && len(l.done) == 0 {
		l.acked.Store(true)
		l.settle()
		l.done <- ev
	}
	sh.mu.Unlock()
}

// ack records that the attempt of call arrived at the server on conn: its
// heartbeat clock starts now.
func (t *legTable) ack(conn transport.Conn, call uint64, now int64) {
	sh := t.shard(call)
	sh.mu.Lock()
	if l := sh.legs[call]; l != nil && l.conn == conn {
		l.heard(now)
	}
	sh.mu.Unlock()
}

// beat records a heartbeat for each item's leg on conn. No wakeup per
// heartbeat: a waiter reads the time when its timer fires, so 10,000
// attempts cost a lookup and a store each.
func (t *legTable) beat(conn transport.Conn, items []frame.HeartbeatItem, now int64) {
	for _, it := range items {
		sh := t.shard(it.Call)
		sh.mu.Lock()
		if l := sh.legs[it.Call]; l != nil && l.conn == conn {
			l.heard(now)
			if it.Progress != nil {
				p := append([]byte(nil), it.Progress...)
				l.latest.Store(&p)
			}
		}
		sh.mu.Unlock()
	}
}

// watchOf is the alarm of conn, nil when no leg waits on it. A heartbeat
// with All is one store in it (connWatch.beat), however many legs wait.
func (t *legTable) watchOf(conn transport.Conn) *connWatch {
	if v, ok := t.watches.Load(conn); ok {
		return v.(*connWatch)
	}
	return nil
}

// heard records that the server named l's attempt at now, in an ack or a
// heartbeat: it arrived, and from now on a heartbeat for the whole
// connection stands for it too. Called with l's shard locked.
func (l *leg) heard(now int64) {
	l.beat.Store(now)
	l.named.Store(true)
	l.acked.Store(true)
}

// broke tells every leg waiting on conn that it closed.
func (t *legTable) broke(conn transport.Conn, err error) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, l := range sh.legs {
			if l.conn == conn && len(l.done) == 0 {
				l.settle()
				l.done <- legEvent{conn: conn, err: err}
			}
		}
		sh.mu.Unlock()
	}
}

func (t *legTable) opShard(op *operation) *legShard { return &t.shards[op.id[0]%legShards] }

func (t *legTable) track(op *operation) {
	sh := t.opShard(op)
	sh.mu.Lock()
	op.trackPrev, op.trackNext = nil, sh.ops
	if sh.ops != nil {
		sh.ops.trackPrev = op
	}
	sh.ops = op
	sh.mu.Unlock()
}

// untrack forgets op: after it returns, InFlight no longer reads it.
func (t *legTable) untrack(op *operation) {
	sh := t.opShard(op)
	sh.mu.Lock()
	if op.trackPrev != nil {
		op.trackPrev.trackNext = op.trackNext
	} else {
		sh.ops = op.trackNext
	}
	if op.trackNext != nil {
		op.trackNext.trackPrev = op.trackPrev
	}
	op.trackPrev, op.trackNext = nil, nil
	sh.mu.Unlock()
}

func (t *legTable) inFlight() []OpInfo {
	var out []OpInfo
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for op := sh.ops; op != nil; op = op.trackNext {
			out = append(out, op.info())
		}
		sh.mu.Unlock()
	}
	if out == nil {
		out = []OpInfo{}
	}
	return out
}
