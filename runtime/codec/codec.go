package codec

import (
	"encoding/json"
	"fmt"
)

// Message is implemented by the argument and result structs that ffgen
// generates: a hand-rolled binary encoding with no reflection, which is why
// Binary is the default codec (see docs/ARCHITECTURE.md, "Payload codec").
type Message interface {
	// AppendFF appends the encoding of the message to b.
	AppendFF(b []byte) []byte
	// UnmarshalFF replaces the message's contents with the decoding of b.
	UnmarshalFF(b []byte) error
}

// Codec turns argument and result values into payload bytes. Both ends of a
// connection must use the same codec.
type Codec interface {
	// Name identifies the codec in logs and errors.
	Name() string
	// Append appends the encoding of v to b.
	Append(b []byte, v any) ([]byte, error)
	// Unmarshal decodes data into v, a pointer. data is valid only during
	// the call (it is a connection's read buffer): v must not keep it.
	Unmarshal(data []byte, v any) error
}

// Binary is the default codec: it calls the generated AppendFF and
// UnmarshalFF methods.
var Binary Codec = binaryCodec{}

// JSON encodes with encoding/json, for debugging and for comparison.
var JSON Codec = jsonCodec{}

type binaryCodec struct{}

func (binaryCodec) Name() string { return "binary" }

func (binaryCodec) Append(b []byte, v any) ([]byte, error) {
	m, ok := v.(Message)
	if !ok {
		return b, fmt.Errorf("codec: binary codec needs a codec.Message, got %T", v)
	}
	return m.AppendFF(b), nil
}

func (binaryCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(Message)
	if !ok {
		return fmt.Errorf("codec: binary codec needs a codec.Message, got %T", v)
	}
	return m.UnmarshalFF(data)
}

type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Append(b []byte, v any) ([]byte, error) {
	p, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	return append(b, p...), nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
