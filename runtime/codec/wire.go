// Package codec holds the binary primitives shared by the frame format and the
// generated argument and result encoders, and the pluggable payload Codec.
//
// The format is deliberately plain: unsigned integers are uvarints, signed ones
// zig-zag varints, strings and byte slices a uvarint length then the bytes.
// Every Reader method checks bounds against the remaining input before it
// allocates, so a hostile length prefix costs an error, not memory.
package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrShort reports input that ended inside a value.
var ErrShort = errors.New("codec: input ends inside a value")

// ErrOverflow reports a varint that does not fit in 64 bits.
var ErrOverflow = errors.New("codec: varint overflows 64 bits")

var errBadBool = errors.New("codec: bool byte is neither 0 nor 1")

// AppendUvarint appends v as an unsigned varint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendVarint appends v as a zig-zag varint.
func AppendVarint(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

// AppendBool appends v as one byte.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// AppendFloat64 appends the IEEE 754 bits of v, little-endian.
func AppendFloat64(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

// AppendString appends a length-prefixed string.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends a length-prefixed byte slice.
func AppendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// Reader decodes values appended by the Append functions. The first error
// sticks: later reads return zero values, and Err reports it, so decoders can
// read a whole struct and check once.
type Reader struct {
	buf     []byte
	err     error
	symbols map[string]string
}

// maxSymbols bounds the symbol table, so hostile input cannot grow it.
const maxSymbols = 1024

// UseSymbols makes Symbol reuse strings across decodes through table, which
// the caller keeps (nil turns it off).
func (r *Reader) UseSymbols(table map[string]string) { r.symbols = table }

// Symbol reads a length-prefixed string that recurs across messages, such as
// a service or method name: with a symbol table it allocates only the first
// time it sees a value.
func (r *Reader) Symbol() string {
	p := r.Bytes()
	if len(p) == 0 {
		return ""
	}
	if r.symbols == nil {
		return string(p)
	}
	if s, ok := r.symbols[string(p)]; ok {
		return s
	}
	s := string(p)
	if len(r.symbols) < maxSymbols {
		r.symbols[s] = s
	}
	return s
}

// NewReader returns a Reader over b. Byte slices it returns alias b.
func NewReader(b []byte) Reader { return Reader{buf: b} }

// Reset points r at b and clears its error.
func (r *Reader) Reset(b []byte) { r.buf, r.err = b, nil }

// Err returns the first error met, if any.
func (r *Reader) Err() error { return r.err }

// Len returns the number of unread bytes.
func (r *Reader) Len() int { return len(r.buf) }

// Fail records err unless an earlier error is already recorded.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
		r.buf = nil
	}
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf)
	if !r.skipVarint(n) {
		return 0
	}
	return v
}

// Varint reads a zig-zag varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf)
	if !r.skipVarint(n) {
		return 0
	}
	return v
}

// skipVarint consumes a varint of n bytes, n as the binary package's
// decoders report it: 0 for short input, negative for an overflow.
func (r *Reader) skipVarint(n int) bool {
	switch {
	case n == 0:
		r.Fail(ErrShort)
		return false
	case n < 0:
		r.Fail(ErrOverflow)
		return false
	}
	r.buf = r.buf[n:]
	return true
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.buf) < 1 {
		r.Fail(ErrShort)
		return 0
	}
	v := r.buf[0]
	r.buf = r.buf[1:]
	return v
}

// Bool reads a byte written by AppendBool; anything but 0 or 1 is an error.
func (r *Reader) Bool() bool {
	switch r.Byte() {
	case 0:
		return false
	case 1:
		return true
	default:
		r.Fail(errBadBool)
		return false
	}
}

// Float64 reads a float written by AppendFloat64.
func (r *Reader) Float64() float64 {
	p := r.Fixed(8)
	if p == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(p))
}

// Fixed reads exactly n bytes, aliasing the input.
func (r *Reader) Fixed(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.buf) < n {
		r.Fail(ErrShort)
		return nil
	}
	v := r.buf[:n:n]
	r.buf = r.buf[n:]
	return v
}

// Bytes reads a length-prefixed byte slice, aliasing the input. An empty
// slice reads as nil.
func (r *Reader) Bytes() []byte {
	n := r.Len32()
	if n == 0 {
		return nil
	}
	return r.Fixed(n)
}

// String reads a length-prefixed string (one allocation unless empty).
func (r *Reader) String() string {
	p := r.Bytes()
	if len(p) == 0 {
		return ""
	}
	return string(p)
}

// Len32 reads a length or count and checks that at least that many bytes
// remain, since every element takes at least one byte. Decoders use it
// before make() so that a forged count cannot allocate more than the input.
func (r *Reader) Len32() int {
	v := r.Uvarint()
	if r.err != nil {
		return 0
	}
	if v > uint64(len(r.buf)) {
		r.Fail(fmt.Errorf("codec: length %d exceeds the %d bytes left: %w", v, len(r.buf), ErrShort))
		return 0
	}
	return int(v)
}

// Done reports an error if input is left over; decoders call it last.
func (r *Reader) Done() error {
	if r.err == nil && len(r.buf) != 0 {
		r.err = fmt.Errorf("codec: %d trailing bytes", len(r.buf))
	}
	return r.err
}
