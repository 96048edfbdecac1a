package runtime

import (
	"fmt"

	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The replication protocol's messages, each the body of a transport.Replica
// frame. Values are part of the wire format.
const (
	msgAppend    uint8 = 1 // leader → follower: entries after prev, and the commit index
	msgAck       uint8 = 2 // follower → leader: how far its log matches the leader's
	msgRecover   uint8 = 3 // candidate → peer: promise my epoch, send your log after from
	msgRecovered uint8 = 4 // peer → candidate: the promise, and the peer's log
	msgFetch     uint8 = 5 // node that is behind → peer: the log after from, or a snapshot
	msgFetched   uint8 = 6 // peer → node that is behind: entries, with a snapshot if needed
)

// Ack and reply statuses.
const (
	ackOK       uint8 = 0 // log matches up to match
	ackStale    uint8 = 1 // the sender's epoch is older than the receiver's
	ackGap      uint8 = 2 // the receiver lacks entries before the ones sent
	ackNotReady uint8 = 3 // the receiver is behind itself and cannot serve a copy
)

// epoch orders leaders: a higher epoch always wins. The node name makes
// epochs unique without any agreement: two nodes that take over at the same
// term still have different epochs.
type epoch struct {
	Term uint64
	Node string
}

// Less reports whether e is older than o.
func (e epoch) Less(o epoch) bool {
	if e.Term != o.Term {
		return e.Term < o.Term
	}
	return e.Node < o.Node
}

func (e epoch) String() string { return fmt.Sprintf("%d/%s", e.Term, e.Node) }

func appendEpoch(b []byte, e epoch) []byte {
	b = codec.AppendUvarint(b, e.Term)
	return codec.AppendString(b, e.Node)
}

func readEpoch(r *codec.Reader) epoch { return epoch{Term: r.Uvarint(), Node: r.String()} }

// entry is one write in a service's log.
type entry struct {
	index    uint64
	epoch    epoch
	opID     [16]byte
	method   string
	entities []string
	payload  []byte
	// applied is set once the write ran here; result is what it answered,
	// kept so that a repeated attempt of the operation is answered, not
	// run again, and copied to nodes that catch up.
	applied bool
	result  transport.Result
	md      []string // the call's metadata, as the Attempt carried it

	exec *execution // the execution waiting for the commit, on a leader
}

// Entry flags, in the byte that was a bool "applied" before metadata.
const (
	entryApplied  byte = 1 << 0
	entryMetadata byte = 1 << 1
)

func appendEntry(b []byte, e *entry) []byte {
	b = codec.AppendUvarint(b, e.index)
	b = appendEpoch(b, e.epoch)
	b = append(b, e.opID[:]...)
	b = codec.AppendString(b, e.method)
	b = codec.AppendUvarint(b, uint64(len(e.entities)))
	for _, id := range e.entities {
		b = codec.AppendString(b, id)
	}
	b = codec.AppendBytes(b, e.payload)
	// The byte that said "applied" also says "metadata follows", so an
	// entry without metadata is the bytes it was before metadata existed.
	var flags byte
	if e.applied {
		flags |= entryApplied
	}
	if len(e.md) > 0 {
		flags |= entryMetadata
	}
	b = append(b, flags)
	if len(e.md) > 0 {
		b = codec.AppendUvarint(b, uint64(len(e.md)/2))
		for _, s := range e.md[:len(e.md)&^1] {
			b = codec.AppendString(b, s)
		}
	}
	if e.applied {
		b = append(b, byte(e.result.Status))
		b = codec.AppendString(b, e.result.Code)
		b = codec.AppendString(b, e.result.Message)
		b = codec.AppendBytes(b, e.result.Payload)
	}
	return b
}

// readEntry decodes an entry; its slices are copies, so it may outlive the
// frame.
func readEntry(r *codec.Reader) *entry {
	e := &entry{index: r.Uvarint(), epoch: readEpoch(r)}
	copy(e.opID[:], r.Fixed(16))
	e.method = r.String()
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%d entities in %d bytes", n, r.Len()))
		return e
	}
	e.entities = make([]string, n)
	for i := range e.entities {
		e.entities[i] = r.String()
	}
	e.payload = append([]byte(nil), r.Bytes()...)
	flags := r.Byte()
	if flags&^(entryApplied|entryMetadata) != 0 {
		r.Fail(fmt.Errorf("unknown entry flags %#x", flags))
		return e
	}
	if flags&entryMetadata != 0 {
		n := r.Len32()
		if n == 0 || 2*n > r.Len() {
			r.Fail(fmt.Errorf("%d metadata pairs in %d bytes", n, r.Len()))
			return e
		}
		e.md = make([]string, 2*n)
		for i := range e.md {
			e.md[i] = r.String()
		}
	}
	if e.applied = flags&entryApplied != 0; e.applied {
		e.result.Status = transport.Status(r.Byte())
		e.result.Code = r.String()
		e.result.Message = r.String()
		if p := r.Bytes(); len(p) > 0 {
			e.result.Payload = append([]byte(nil), p...)
		}
	}
	return e
}

func appendEntries(b []byte, es []*entry) []byte {
	b = codec.AppendUvarint(b, uint64(len(es)))
	for _, e := range es {
		b = appendEntry(b, e)
	}
	return b
}

func readEntries(r *codec.Reader) []*entry {
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		r.Fail(fmt.Errorf("%d entries in %d bytes", n, r.Len()))
		return nil
	}
	out := make([]*entry, 0, n)
	for range n {
		if r.Err() != nil {
			return nil
		}
		out = append(out, readEntry(r))
	}
	return out
}

// appendMsg is msgAppend.
type appendMsg struct {
	epoch     epoch
	prevIndex uint64
	prevEpoch epoch
	commit    uint64
	entries   []*entry
	snapshot  bool // the log (from prevIndex) no longer reaches the follower: fetch a snapshot
}

func (m *appendMsg) encode(b []byte) []byte {
	b = appendEpoch(b, m.epoch)
	b = codec.AppendUvarint(b, m.prevIndex)
	b = appendEpoch(b, m.prevEpoch)
	b = codec.AppendUvarint(b, m.commit)
	b = appendEntries(b, m.entries)
	return codec.AppendBool(b, m.snapshot)
}

func (m *appendMsg) decode(r *codec.Reader) {
	m.epoch = readEpoch(r)
	m.prevIndex = r.Uvarint()
	m.prevEpoch = readEpoch(r)
	m.commit = r.Uvarint()
	m.entries = readEntries(r)
	m.snapshot = r.Bool()
}

// ackMsg is msgAck.
type ackMsg struct {
	epoch  epoch // the follower's epoch
	status uint8
	match  uint64 // the follower's log agrees with the leader's up to here
}

func (m *ackMsg) encode(b []byte) []byte {
	b = appendEpoch(b, m.epoch)
	b = append(b, m.status)
	return codec.AppendUvarint(b, m.match)
}

func (m *ackMsg) decode(r *codec.Reader) {
	m.epoch = readEpoch(r)
	m.status = r.Byte()
	m.match = r.Uvarint()
}

// recoverMsg is msgRecover.
type recoverMsg struct {
	epoch epoch  // the candidate's new epoch
	from  uint64 // the candidate's commit index: send the log after it
}

func (m *recoverMsg) encode(b []byte) []byte {
	b = appendEpoch(b, m.epoch)
	return codec.AppendUvarint(b, m.from)
}

func (m *recoverMsg) decode(r *codec.Reader) {
	m.epoch = readEpoch(r)
	m.from = r.Uvarint()
}

// recoveredMsg is msgRecovered.
type recoveredMsg struct {
	epoch   epoch // the peer's epoch after the promise
	status  uint8 // ackOK: promised; ackStale: the peer knows a newer epoch; ackNotReady: the peer is behind
	commit  uint64
	last    uint64
	lastEp  epoch
	covered bool     // entries start right after the candidate's from
	entries []*entry // after from, when covered
}

func (m *recoveredMsg) encode(b []byte) []byte {
	b = appendEpoch(b, m.epoch)
	b = append(b, m.status)
	b = codec.AppendUvarint(b, m.commit)
	b = codec.AppendUvarint(b, m.last)
	b = appendEpoch(b, m.lastEp)
	b = codec.AppendBool(b, m.covered)
	return appendEntries(b, m.entries)
}

func (m *recoveredMsg) decode(r *codec.Reader) {
	m.epoch = readEpoch(r)
	m.status = r.Byte()
	m.commit = r.Uvarint()
	m.last = r.Uvarint()
	m.lastEp = readEpoch(r)
	m.covered = r.Bool()
	m.entries = readEntries(r)
}

// fetchMsg is msgFetch.
type fetchMsg struct {
	from     uint64 // the requester has applied up to here
	snapshot bool   // its state is wrong (it diverged): send a snapshot
}

func (m *fetchMsg) encode(b []byte) []byte {
	b = codec.AppendUvarint(b, m.from)
	return codec.AppendBool(b, m.snapshot)
}

func (m *fetchMsg) decode(r *codec.Reader) {
	m.from = r.Uvarint()
	m.snapshot = r.Bool()
}

// fetchedMsg is msgFetched: a snapshot (when the log no longer reaches back
// to from) and the log entries after it.
type fetchedMsg struct {
	status   uint8 // ackOK, or ackNotReady
	epoch    epoch // the sender's epoch
	snapshot bool
	snapAt   uint64 // the snapshot holds every entry up to here
	snapEp   epoch
	offset   uint64 // of this chunk of the state
	total    uint64 // the state's size
	state    []byte
	commit   uint64
	entries  []*entry
	bootable bool // the sender never held any state either
}

func (m *fetchedMsg) encode(b []byte) []byte {
	b = append(b, m.status)
	b = appendEpoch(b, m.epoch)
	b = codec.AppendBool(b, m.snapshot)
	b = codec.AppendUvarint(b, m.snapAt)
	b = appendEpoch(b, m.snapEp)
	b = codec.AppendUvarint(b, m.offset)
	b = codec.AppendUvarint(b, m.total)
	b = codec.AppendBytes(b, m.state)
	b = codec.AppendUvarint(b, m.commit)
	b = appendEntries(b, m.entries)
	return codec.AppendBool(b, m.bootable)
}

func (m *fetchedMsg) decode(r *codec.Reader) {
	m.status = r.Byte()
	m.epoch = readEpoch(r)
	m.snapshot = r.Bool()
	m.snapAt = r.Uvarint()
	m.snapEp = readEpoch(r)
	m.offset = r.Uvarint()
	m.total = r.Uvarint()
	m.state = append([]byte(nil), r.Bytes()...)
	m.commit = r.Uvarint()
	m.entries = readEntries(r)
	m.bootable = r.Bool()
}

// replicaMessage is what every message above implements.
type replicaMessage interface {
	encode(b []byte) []byte
	decode(r *codec.Reader)
}

// sendReplica encodes m and sends it on c; a full queue or a closed
// connection is reported, and the protocol recovers from the loss.
func sendReplica(c transport.Conn, service string, kind uint8, m replicaMessage) error {
	return c.Send(&transport.Replica{Kind: kind, Service: service, Body: m.encode(nil)})
}

// decodeReplica decodes f's body into m.
func decodeReplica(f *transport.Replica, m replicaMessage) error {
	var r codec.Reader
	r.Reset(f.Body)
	m.decode(&r)
	return r.Done()
}
