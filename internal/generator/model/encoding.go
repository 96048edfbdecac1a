package model

import (
	"go/types"
	"iter"
)

// Encoding is how the codec carries a type.
type Encoding int

const (
	Unsupported Encoding = iota
	// Basic kinds, encoded inline with a conversion to the basic type.
	Bool
	String
	Int     // zig-zag varint
	Uint    // uvarint
	Float   // float32 and float64, as float64 bits
	Complex // two floats
	Bytes   // a slice whose element is exactly byte: length-prefixed
	Error   // the error interface: codec.AppendError, message and chain
	Time    // time.Time: codec.AppendTime, instant, offset and location
	// Kinds with their own helper function.
	Marshaler // encoding.BinaryMarshaler and BinaryUnmarshaler
	Struct
	Pointer
	Slice
	Array
	Map
)

// NeedsHelper reports whether e gets its own encode and decode functions.
func (e Encoding) NeedsHelper() bool { return e >= Marshaler }

// Classify says how the codec carries t. Marshaler methods win over the
// structure of the type, except for time.Time, which the codec carries
// with its location.
func Classify(t types.Type) Encoding {
	t = types.Unalias(t)
	if isTime(t) {
		return Time
	}
	if isMarshaler(t) {
		return Marshaler
	}
	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Kind() == types.Bool:
			return Bool
		case u.Kind() == types.String:
			return String
		case u.Info()&types.IsInteger != 0 && u.Info()&types.IsUnsigned != 0:
			return Uint
		case u.Info()&types.IsInteger != 0:
			return Int
		case u.Info()&types.IsFloat != 0:
			return Float
		case u.Info()&types.IsComplex != 0:
			return Complex
		}
	case *types.Interface:
		if types.Identical(t, errorType) {
			return Error
		}
	case *types.Struct:
		return Struct
	case *types.Pointer:
		return Pointer
	case *types.Slice:
		if types.Identical(u.Elem(), types.Typ[types.Byte]) {
			return Bytes
		}
		return Slice
	case *types.Array:
		return Array
	case *types.Map:
		return Map
	}
	return Unsupported
}

// EncodedFields yields the fields of s the codec carries, in order: all but
// blank ones, which a program cannot read or set.
func EncodedFields(s *types.Struct) iter.Seq[*types.Var] {
	return func(yield func(*types.Var) bool) {
		for i := range s.NumFields() {
			if f := s.Field(i); f.Name() != "_" && !yield(f) {
				return
			}
		}
	}
}

var errorType = types.Universe.Lookup("error").Type()

// isTime reports whether t is time.Time, whose MarshalBinary drops the
// location's name.
func isTime(t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Time"
}

// IsError reports whether t is the predeclared error interface.
func IsError(t types.Type) bool { return types.Identical(t, errorType) }

// ImplementsError reports whether t or *t satisfies the error interface, and
// which of the two does.
func ImplementsError(t types.Type) (value, pointer bool) {
	iface := errorType.Underlying().(*types.Interface)
	return types.Implements(t, iface), types.Implements(types.NewPointer(t), iface)
}

// isMarshaler reports whether a value of t has MarshalBinary and a *t has
// UnmarshalBinary, with the signatures of package encoding.
func isMarshaler(t types.Type) bool {
	if _, ok := t.(*types.Named); !ok {
		return false
	}
	return hasMethod(t, "MarshalBinary", marshalSig) && hasMethod(types.NewPointer(t), "UnmarshalBinary", unmarshalSig)
}

func hasMethod(t types.Type, name string, want *types.Signature) bool {
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, name)
	fn, ok := obj.(*types.Func)
	if !ok {
		return false
	}
	// An indirect method found on a value type is not in its method set.
	if _, isPtr := t.(*types.Pointer); !isPtr {
		if recv := fn.Signature().Recv(); recv != nil {
			if _, ptrRecv := recv.Type().(*types.Pointer); ptrRecv {
				return false
			}
		}
	}
	return types.Identical(fn.Signature(), want)
}

var (
	byteSlice    = types.NewSlice(types.Typ[types.Byte])
	marshalSig   = types.NewSignatureType(nil, nil, nil, nil, types.NewTuple(types.NewParam(0, nil, "", byteSlice), types.NewParam(0, nil, "", errorType)), false)
	unmarshalSig = types.NewSignatureType(nil, nil, nil, types.NewTuple(types.NewParam(0, nil, "", byteSlice)), types.NewTuple(types.NewParam(0, nil, "", errorType)), false)
)
