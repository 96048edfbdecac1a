package replica

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The kinds of frame.Replica frames a group sends; part of the wire
// format. The numbers below 16 belonged to the protocol raft replaced: a
// node of that protocol reports these as unknown instead of misreading
// them.
const (
	KindRaft  uint8 = 16 // a raft message, protobuf-encoded as raftpb defines it
	KindHello uint8 = 17 // who a node is in the group (hello)
	KindChunk uint8 = 18 // a part of a raft message too large for one frame (a snapshot)
)

// hello tells the peers of a group who this node is: its raft ID (new for
// every process: a node that restarts empty is a new member) and whether
// it belongs to a formed group. Nodes exchange hellos to form the group
// and to ask the leader to be added. The leader's hellos also carry its
// term and commit index: a follower learns from them how far behind it
// is, which raft's heartbeats do not tell (they carry at most what the
// follower holds already).
type hello struct {
	name   string
	id     uint64
	member bool // its configuration is not empty: the group has formed
	// term and commit: the sender leads in term, and has committed up to
	// commit; both zero from a node that does not lead.
	term, commit uint64
	// removed is the receiver's raft ID when a configuration change the
	// sender applied took it out of the group: the receiver is no member
	// under that ID, whatever its own log says (members.go, outOfGroup).
	removed uint64
}

const (
	helloName    = 1
	helloID      = 2
	helloMember  = 3
	helloTerm    = 4
	helloCommit  = 5
	helloRemoved = 6
)

func (h *hello) marshal() []byte {
	var b []byte
	b = appendString(b, helloName, h.name)
	b = protowire.AppendTag(b, helloID, protowire.VarintType)
	b = protowire.AppendVarint(b, h.id)
	if h.member {
		b = protowire.AppendTag(b, helloMember, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if h.term != 0 {
		b = protowire.AppendTag(b, helloTerm, protowire.VarintType)
		b = protowire.AppendVarint(b, h.term)
		b = protowire.AppendTag(b, helloCommit, protowire.VarintType)
		b = protowire.AppendVarint(b, h.commit)
	}
	if h.removed != 0 {
		b = protowire.AppendTag(b, helloRemoved, protowire.VarintType)
		b = protowire.AppendVarint(b, h.removed)
	}
	return b
}

func (h *hello) unmarshal(b []byte) error {
	*h = hello{}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == helloName && typ == protowire.BytesType:
			h.name = string(v)
		case num == helloID && typ == protowire.VarintType:
			h.id = n
		case num == helloMember && typ == protowire.VarintType:
			h.member = n != 0
		case num == helloTerm && typ == protowire.VarintType:
			h.term = n
		case num == helloCommit && typ == protowire.VarintType:
			h.commit = n
		case num == helloRemoved && typ == protowire.VarintType:
			h.removed = n
		}
		return nil
	})
	if err == nil && (h.name == "" || h.id == 0) {
		err = errors.New("hello without name or ID")
	}
	return err
}

// chunk is one part of a message split across frames. Parts go in order
// on one connection; a part of another message, or out of order, drops
// what was gathered.
type chunk struct {
	msg   uint64 // the message's number, new for each split message
	seq   uint32
	total uint32
	data  []byte
}

const (
	chunkMsg   = 1
	chunkSeq   = 2
	chunkTotal = 3
	chunkData  = 4
)

func (c *chunk) marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, chunkMsg, protowire.VarintType)
	b = protowire.AppendVarint(b, c.msg)
	b = protowire.AppendTag(b, chunkSeq, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(c.seq))
	b = protowire.AppendTag(b, chunkTotal, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(c.total))
	b = protowire.AppendTag(b, chunkData, protowire.BytesType)
	return protowire.AppendBytes(b, c.data)
}

func (c *chunk) unmarshal(b []byte) error {
	*c = chunk{}
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == chunkMsg && typ == protowire.VarintType:
			c.msg = n
		case num == chunkSeq && typ == protowire.VarintType:
			c.seq = uint32(n)
		case num == chunkTotal && typ == protowire.VarintType:
			c.total = uint32(n)
		case num == chunkData && typ == protowire.BytesType:
			c.data = v
		}
		return nil
	})
	if err == nil && (c.total == 0 || c.seq >= c.total) {
		err = fmt.Errorf("chunk %d of %d", c.seq, c.total)
	}
	return err
}

// assembly gathers one peer's split message, bounded by max bytes.
type assembly struct {
	msg  uint64
	next uint32
	buf  []byte
}

// add takes the next chunk; it returns the whole message once the last
// part is in.
func (a *assembly) add(c *chunk, max int) ([]byte, error) {
	if c.seq == 0 {
		a.msg, a.next, a.buf = c.msg, 0, a.buf[:0]
	}
	if c.msg != a.msg || c.seq != a.next {
		a.buf, a.next = nil, 0
		return nil, fmt.Errorf("chunk %d of message %d out of order", c.seq, c.msg)
	}
	if len(a.buf)+len(c.data) > max {
		a.buf, a.next = nil, 0
		return nil, fmt.Errorf("message larger than %d bytes", max)
	}
	a.buf = append(a.buf, c.data...)
	a.next++
	if a.next < c.total {
		return nil, nil
	}
	out := a.buf
	a.buf, a.next = nil, 0
	return out, nil
}
