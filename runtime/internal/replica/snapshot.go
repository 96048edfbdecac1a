package replica

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// A snapshot's data: the operation-ID table, the names of the group's
// members, the raft IDs taken out of the group, and the service's own
// state (StateTransfer). The applied index
// and the configuration are raft's snapshot metadata.
const (
	snapFormat  = 1 // varint: snapshotFormat
	snapWritten = 2 // repeated: a recorded write
	snapName    = 3 // repeated: a member's raft ID and name
	snapState   = 4 // the service's state
	snapService = 5 // the service's name, so that no snapshot lands in another service
	snapRemoved = 6 // repeated varint: a raft ID a configuration change took out of the group

	writtenID      = 1
	writtenIndex   = 2
	writtenResult_ = 3

	nameID   = 1
	nameName = 2
)

// snapshotFormat changes when an existing field changes meaning.
const snapshotFormat = 1

type snapshotData struct {
	service string
	written *written
	names   map[uint64]string
	removed map[uint64]bool
	state   []byte
}

func (d *snapshotData) marshal() []byte {
	// Sized for the usual record up front: grown by doubling, a large
	// table was copied some twenty times while the apply loop waited.
	b := make([]byte, 0, 64+len(d.state)+64*d.written.len())
	b = protowire.AppendTag(b, snapFormat, protowire.VarintType)
	b = protowire.AppendVarint(b, snapshotFormat)
	b = appendString(b, snapService, d.service)
	var rec, res []byte
	d.written.each(func(id [16]byte, r writtenResult) {
		res = appendResult(res[:0], &r.result)
		rec = rec[:0]
		rec = protowire.AppendTag(rec, writtenID, protowire.BytesType)
		rec = protowire.AppendBytes(rec, id[:])
		rec = protowire.AppendTag(rec, writtenIndex, protowire.VarintType)
		rec = protowire.AppendVarint(rec, r.index)
		rec = protowire.AppendTag(rec, writtenResult_, protowire.BytesType)
		rec = protowire.AppendBytes(rec, res)
		b = protowire.AppendTag(b, snapWritten, protowire.BytesType)
		b = protowire.AppendBytes(b, rec)
	})
	for id, name := range d.names {
		rec = rec[:0]
		rec = protowire.AppendTag(rec, nameID, protowire.VarintType)
		rec = protowire.AppendVarint(rec, id)
		rec = appendString(rec, nameName, name)
		b = protowire.AppendTag(b, snapName, protowire.BytesType)
		b = protowire.AppendBytes(b, rec)
	}
	for id := range d.removed {
		b = protowire.AppendTag(b, snapRemoved, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
	}
	if d.state != nil {
		b = protowire.AppendTag(b, snapState, protowire.BytesType)
		b = protowire.AppendBytes(b, d.state)
	}
	return b
}

// unmarshalSnapshot decodes a snapshot's data. max bounds the table it
// rebuilds, as the receiver's configuration does.
func unmarshalSnapshot(b []byte, max int) (*snapshotData, error) {
	d := &snapshotData{written: newWritten(max), names: make(map[uint64]string), removed: make(map[uint64]bool)}
	format := uint64(0)
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == snapFormat && typ == protowire.VarintType:
			format = n
		case num == snapService && typ == protowire.BytesType:
			d.service = string(v)
		case num == snapWritten && typ == protowire.BytesType:
			var id [16]byte
			var index uint64
			var res []byte
			sawID := false
			if err := walk(v, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
				switch {
				case num == writtenID && typ == protowire.BytesType && len(v) == 16:
					copy(id[:], v)
					sawID = true
				case num == writtenIndex && typ == protowire.VarintType:
					index = n
				case num == writtenResult_ && typ == protowire.BytesType:
					res = v
				}
				return nil
			}); err != nil {
				return err
			}
			if !sawID {
				return errors.New("a recorded write without its operation ID")
			}
			r, err := readResult(res)
			if err != nil {
				return err
			}
			d.written.put(id, index, r)
		case num == snapName && typ == protowire.BytesType:
			var id uint64
			var name string
			if err := walk(v, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
				switch {
				case num == nameID && typ == protowire.VarintType:
					id = n
				case num == nameName && typ == protowire.BytesType:
					name = string(v)
				}
				return nil
			}); err != nil {
				return err
			}
			if id != 0 && name != "" {
				d.names[id] = name
			}
		case num == snapRemoved && typ == protowire.VarintType:
			d.removed[n] = true
		case num == snapState && typ == protowire.BytesType:
			d.state = append([]byte{}, v...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot data: %w", err)
	}
	if format != snapshotFormat {
		return nil, fmt.Errorf("snapshot data of format %d; this build reads format %d", format, snapshotFormat)
	}
	return d, nil
}
