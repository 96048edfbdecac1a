package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The payload of a generated message is protobuf's wire format
// (protowire): a sequence of fields, each a tag (field number and wire
// type) and a value. A decoder skips the fields it does not know and leaves
// the ones it does not get at their zero value, so that adding or removing a
// field keeps two versions of a service talking (see docs/ARCHITECTURE.md,
// "Payload codec"). Field numbers are assigned by ffgen and recorded in the
// generated file's schema, so they survive regeneration.
//
// How Go types map to wire types:
//
//	bool, integers          varint (signed ones zig-zag, as sint64)
//	floats                  fixed64 (the float64 bits)
//	complex numbers         bytes: real and imaginary float64 bits
//	string, []byte          bytes
//	error, time.Time        bytes: AppendError, AppendTime
//	structs, pointers, slices, arrays, maps, BinaryMarshalers
//	                        bytes: a nested message (see the generator)
//
// A value that does not fit the receiver's type (5000000000 for an int32)
// is a decode error naming the field, never a different number.

// The Append*Field functions append one field with its tag, whatever its
// value; generated code leaves out a field at its zero value itself.

// AppendVarintField appends field num holding v, zig-zag encoded.
func AppendVarintField(b []byte, num protowire.Number, v int64) []byte {
	b = appendTag(b, num, protowire.VarintType)
	return appendVarint(b, protowire.EncodeZigZag(v))
}

// AppendUvarintField appends field num holding v.
func AppendUvarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = appendTag(b, num, protowire.VarintType)
	return appendVarint(b, v)
}

// AppendBoolField appends field num holding v.
func AppendBoolField(b []byte, num protowire.Number, v bool) []byte {
	b = appendTag(b, num, protowire.VarintType)
	return appendVarint(b, protowire.EncodeBool(v))
}

// AppendFloatField appends field num holding the bits of v.
func AppendFloatField(b []byte, num protowire.Number, v float64) []byte {
	b = appendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// AppendComplexField appends field num holding the real and imaginary
// parts of v.
func AppendComplexField(b []byte, num protowire.Number, v complex128) []byte {
	b = appendTag(b, num, protowire.BytesType)
	b = appendVarint(b, 16)
	b = protowire.AppendFixed64(b, math.Float64bits(real(v)))
	return protowire.AppendFixed64(b, math.Float64bits(imag(v)))
}

// AppendStringField appends field num holding s.
func AppendStringField(b []byte, num protowire.Number, s string) []byte {
	b = appendTag(b, num, protowire.BytesType)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytesField appends field num holding p.
func AppendBytesField(b []byte, num protowire.Number, p []byte) []byte {
	b = appendTag(b, num, protowire.BytesType)
	b = appendVarint(b, uint64(len(p)))
	return append(b, p...)
}

// AppendErrorField appends field num holding err as AppendError writes it.
func AppendErrorField(b []byte, num protowire.Number, err error) []byte {
	b, mark := BeginMessage(b, num)
	return EndMessage(AppendError(b, err), mark, num, false)
}

// AppendTimeField appends field num holding t as AppendTime writes it.
func AppendTimeField(b []byte, num protowire.Number, t time.Time) []byte {
	b, mark := BeginMessage(b, num)
	return EndMessage(AppendTime(b, t), mark, num, false)
}

// IsZeroTime reports whether t is the zero time.Time, which a message
// leaves out. Unlike t.IsZero it is false for the zero instant in another
// location, which would not come back as it was.
func IsZeroTime(t time.Time) bool { return t == time.Time{} }

// BeginMessage appends the tag of field num, a nested message, and room for
// its length; the caller appends the message and then calls EndMessage with
// the mark it returned.
func BeginMessage(b []byte, num protowire.Number) ([]byte, int) {
	mark := len(b)
	b = appendTag(b, num, protowire.BytesType)
	return append(b, 0), mark
}

// EndMessage writes the length of the nested message begun at mark. With
// omitEmpty an empty message is taken out again, tag and all: a field whose
// value encodes to nothing is not sent.
func EndMessage(b []byte, mark int, num protowire.Number, omitEmpty bool) []byte {
	at := mark + protowire.SizeTag(num)
	n := len(b) - at - 1
	switch {
	case n == 0 && omitEmpty:
		return b[:mark]
	case n < 0x80:
		b[at] = byte(n)
		return b
	}
	size := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, size-1)...)
	copy(b[at+size:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

// appendTag and appendVarint append in line the one byte that small field
// numbers and values take, and call protowire for the rest.
func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	if num < 16 {
		return append(b, byte(num)<<3|byte(typ))
	}
	return protowire.AppendTag(b, num, typ)
}

func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// errWireType reports a field whose wire type is not the one its type is
// carried with: the two sides disagree about what the field is.
func errWireType(got, want protowire.Type) error {
	return fmt.Errorf("wire type %s, expected %s (the field's type changed incompatibly)", wireTypeName(got), wireTypeName(want))
}

func wireTypeName(t protowire.Type) string {
	switch t {
	case protowire.VarintType:
		return "varint"
	case protowire.Fixed32Type:
		return "fixed32"
	case protowire.Fixed64Type:
		return "fixed64"
	case protowire.BytesType:
		return "bytes"
	case protowire.StartGroupType, protowire.EndGroupType:
		return "group"
	}
	return fmt.Sprintf("%d", t)
}

// consumeErr turns protowire's negative length into an error.
func consumeErr(n int) error {
	if n == -1 { // protowire's code for truncated input
		return ErrShort
	}
	return fmt.Errorf("codec: %w", protowire.ParseError(n))
}

// Number is a field number; WireType how a field's value is encoded.
// Generated code names them through this package.
type (
	Number   = protowire.Number
	WireType = protowire.Type
)

// DecodeMessage calls field for each field of the message b, in order,
// with the bytes from the field's value on; field returns how many bytes
// the value took (SkipField's count for a field it does not know).
func DecodeMessage(b []byte, field func(num Number, typ WireType, b []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return consumeErr(n)
		}
		m, err := field(num, typ, b[n:])
		if err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

// SkipField consumes the value of a field the decoder does not know: one a
// newer version added, or an older one removed.
func SkipField(b []byte, num protowire.Number, typ protowire.Type) (int, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, consumeErr(n)
	}
	return n, nil
}

func consumeVarint(b []byte, typ protowire.Type) (uint64, int, error) {
	if typ != protowire.VarintType {
		return 0, 0, errWireType(typ, protowire.VarintType)
	}
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, consumeErr(n)
	}
	return v, n, nil
}

// ConsumeVarintField reads a signed integer for a field of bits bits (0
// for int, whose size is the platform's); a value out of its range is an
// error.
func ConsumeVarintField(b []byte, typ protowire.Type, size int) (int64, int, error) {
	u, n, err := consumeVarint(b, typ)
	if err != nil {
		return 0, 0, err
	}
	v := protowire.DecodeZigZag(u)
	if size == 0 {
		size = bits.UintSize
	}
	if size < 64 && (v < -1<<(size-1) || v > 1<<(size-1)-1) {
		return 0, 0, &RangeError{Value: fmt.Sprint(v), Bits: size}
	}
	return v, n, nil
}

// ConsumeUvarintField reads an unsigned integer for a field of bits bits
// (0 for uint and uintptr).
func ConsumeUvarintField(b []byte, typ protowire.Type, size int) (uint64, int, error) {
	v, n, err := consumeVarint(b, typ)
	if err != nil {
		return 0, 0, err
	}
	if size == 0 {
		size = bits.UintSize
	}
	if size < 64 && v > 1<<size-1 {
		return 0, 0, &RangeError{Value: fmt.Sprint(v), Bits: size, Unsigned: true}
	}
	return v, n, nil
}

// ConsumeBoolField reads a bool: 0 or 1.
func ConsumeBoolField(b []byte, typ protowire.Type) (bool, int, error) {
	v, n, err := consumeVarint(b, typ)
	if err != nil {
		return false, 0, err
	}
	if v > 1 {
		return false, 0, &RangeError{Value: fmt.Sprint(v), Bool: true}
	}
	return v == 1, n, nil
}

// ConsumeFloatField reads a float for a field of bits bits: a float32
// field refuses a value it cannot hold exactly.
func ConsumeFloatField(b []byte, typ protowire.Type, size int) (float64, int, error) {
	if typ != protowire.Fixed64Type {
		return 0, 0, errWireType(typ, protowire.Fixed64Type)
	}
	u, n := protowire.ConsumeFixed64(b)
	if n < 0 {
		return 0, 0, consumeErr(n)
	}
	v := math.Float64frombits(u)
	if size == 32 && !fitsFloat32(v) {
		return 0, 0, &RangeError{Value: fmt.Sprint(v), Bits: 32, Float: true}
	}
	return v, n, nil
}

func fitsFloat32(v float64) bool { return math.IsNaN(v) || float64(float32(v)) == v }

// ConsumeComplexField reads a complex number for a field of bits bits
// (64 or 128).
func ConsumeComplexField(b []byte, typ protowire.Type, size int) (complex128, int, error) {
	p, n, err := ConsumeBytesField(b, typ)
	if err != nil {
		return 0, 0, err
	}
	if len(p) != 16 {
		return 0, 0, fmt.Errorf("a complex number of %d bytes, expected 16", len(p))
	}
	re := math.Float64frombits(binary.LittleEndian.Uint64(p[:8]))
	im := math.Float64frombits(binary.LittleEndian.Uint64(p[8:]))
	if size == 64 && (!fitsFloat32(re) || !fitsFloat32(im)) {
		return 0, 0, &RangeError{Value: fmt.Sprint(complex(re, im)), Bits: 64, Float: true, Complex: true}
	}
	return complex(re, im), n, nil
}

// ConsumeBytesField reads a length-delimited value: a string, bytes or a
// nested message. The slice aliases b.
func ConsumeBytesField(b []byte, typ protowire.Type) ([]byte, int, error) {
	if typ != protowire.BytesType {
		return nil, 0, errWireType(typ, protowire.BytesType)
	}
	p, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, 0, consumeErr(n)
	}
	return p, n, nil
}

// ConsumeStringField reads a string (one allocation unless empty).
func ConsumeStringField(b []byte, typ protowire.Type) (string, int, error) {
	p, n, err := ConsumeBytesField(b, typ)
	if err != nil || len(p) == 0 {
		return "", n, err
	}
	return string(p), n, nil
}

// ConsumeErrorField reads an error written by AppendErrorField.
func ConsumeErrorField(b []byte, typ protowire.Type) (error, int, error) {
	p, n, err := ConsumeBytesField(b, typ)
	if err != nil {
		return nil, 0, err
	}
	r := NewReader(p)
	v := ReadError(&r)
	return v, n, r.Done()
}

// ConsumeTimeField reads a time written by AppendTimeField.
func ConsumeTimeField(b []byte, typ protowire.Type) (time.Time, int, error) {
	p, n, err := ConsumeBytesField(b, typ)
	if err != nil {
		return time.Time{}, 0, err
	}
	r := NewReader(p)
	v := ReadTime(&r)
	return v, n, r.Done()
}

// RangeError reports a value that does not fit the receiver's type: the
// sender's type is wider (a field widened from int32 to int64, read by a
// node that still has int32).
type RangeError struct {
	Value    string
	Bits     int
	Unsigned bool
	Float    bool
	Complex  bool
	Bool     bool
}

func (e *RangeError) Error() string {
	var typ string
	switch {
	case e.Bool:
		typ = "bool"
	case e.Complex:
		typ = fmt.Sprintf("complex%d", e.Bits)
	case e.Float:
		typ = fmt.Sprintf("float%d", e.Bits)
	case e.Unsigned:
		typ = fmt.Sprintf("a %d-bit unsigned integer", e.Bits)
	default:
		typ = fmt.Sprintf("a %d-bit integer", e.Bits)
	}
	return fmt.Sprintf("%s does not fit in %s", e.Value, typ)
}

// FieldError is a decode error in a field of a message, with the path of
// fields from the outermost message down.
type FieldError struct {
	Path []string
	Err  error
}

// WrapField returns err as an error of the field name: a *FieldError with
// name in front of the path err already has.
func WrapField(name string, err error) error {
	if fe, ok := err.(*FieldError); ok {
		fe.Path = append([]string{name}, fe.Path...)
		return fe
	}
	return &FieldError{Path: []string{name}, Err: err}
}

func (e *FieldError) Error() string {
	return "codec: field " + strings.Join(e.Path, ".") + ": " + strings.TrimPrefix(e.Err.Error(), "codec: ")
}

func (e *FieldError) Unwrap() error { return e.Err }
