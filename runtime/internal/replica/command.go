package replica

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ffgen/ffgen/internal/frame"
)

// Command is one replicated write: the data of a raft log entry. It is
// encoded with protobuf's wire format, so that a field can be added later
// and an older node skips what it does not know.
type Command struct {
	OpID     [16]byte
	Method   string
	Entities []string
	Payload  []byte   // the encoded arguments
	MD       []string // the call's metadata, key and value in turn
}

// Field numbers of a Command; part of the log format.
const (
	cmdOpID     = 1
	cmdMethod   = 2
	cmdEntity   = 3
	cmdPayload  = 4
	cmdMetadata = 5
)

// Marshal appends c's encoding to b.
func (c *Command) Marshal(b []byte) []byte {
	b = protowire.AppendTag(b, cmdOpID, protowire.BytesType)
	b = protowire.AppendBytes(b, c.OpID[:])
	b = appendString(b, cmdMethod, c.Method)
	for _, e := range c.Entities {
		b = protowire.AppendTag(b, cmdEntity, protowire.BytesType)
		b = protowire.AppendString(b, e)
	}
	if len(c.Payload) > 0 {
		b = protowire.AppendTag(b, cmdPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, c.Payload)
	}
	for _, s := range c.MD {
		b = protowire.AppendTag(b, cmdMetadata, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	return b
}

// Unmarshal decodes b into c. The slices c keeps point into b.
func (c *Command) Unmarshal(b []byte) error {
	*c = Command{}
	sawID := false
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case cmdOpID:
			if len(v) != len(c.OpID) {
				return fmt.Errorf("operation ID of %d bytes", len(v))
			}
			copy(c.OpID[:], v)
			sawID = true
		case cmdMethod:
			c.Method = string(v)
		case cmdEntity:
			c.Entities = append(c.Entities, string(v))
		case cmdPayload:
			c.Payload = v
		case cmdMetadata:
			c.MD = append(c.MD, string(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !sawID || c.Method == "" {
		return errors.New("command without operation ID or method")
	}
	if len(c.MD)%2 != 0 {
		return errors.New("command metadata of an odd length")
	}
	return nil
}

// Field numbers of a recorded result.
const (
	resStatus  = 1
	resCode    = 2
	resMessage = 3
	resPayload = 4
)

func appendResult(b []byte, r *frame.Result) []byte {
	b = protowire.AppendTag(b, resStatus, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(r.Status))
	b = appendString(b, resCode, r.Code)
	b = appendString(b, resMessage, r.Message)
	if len(r.Payload) > 0 {
		b = protowire.AppendTag(b, resPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Payload)
	}
	return b
}

func readResult(b []byte) (frame.Result, error) {
	var r frame.Result
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == resStatus && typ == protowire.VarintType:
			if n > uint64(frame.StatusFailover) {
				return fmt.Errorf("result status %d", n)
			}
			r.Status = frame.Status(n)
		case num == resCode && typ == protowire.BytesType:
			r.Code = string(v)
		case num == resMessage && typ == protowire.BytesType:
			r.Message = string(v)
		case num == resPayload && typ == protowire.BytesType:
			r.Payload = append([]byte(nil), v...)
		}
		return nil
	})
	return r, err
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// walk calls f for every field of b: v is a length-delimited field's bytes,
// n a varint's or fixed field's value. Unknown fields are f's to skip.
func walk(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, tl := protowire.ConsumeTag(b)
		if tl < 0 {
			return protowire.ParseError(tl)
		}
		b = b[tl:]
		var v []byte
		var n uint64
		var l int
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			n, l = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var n32 uint32
			n32, l = protowire.ConsumeFixed32(b)
			n = uint64(n32)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
