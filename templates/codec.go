package templates

import (
	"go/types"
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// place is an addressable value being encoded or decoded: val is the
// value, ptr (when set) an expression for its address that needs no &.
type place struct {
	val jen.Code
	ptr jen.Code
}

func (p place) addr() jen.Code {
	if p.ptr != nil {
		return p.ptr
	}
	return jen.Op("&").Add(p.val)
}

// toBasic converts x, of type t, to the basic type, unless it is one.
func toBasic(t types.Type, basic types.BasicKind, x jen.Code) *jen.Statement {
	if types.Identical(t, types.Typ[basic]) {
		return jen.Add(x)
	}
	return jen.Id(types.Typ[basic].Name()).Call(x)
}

// fromBasic converts x, of the basic type, to t, unless t is that type.
func (g *gen) fromBasic(t types.Type, basic types.BasicKind, x jen.Code) *jen.Statement {
	if types.Identical(t, types.Typ[basic]) {
		return jen.Add(x)
	}
	return jen.Add(g.typ(t)).Call(x)
}

// size is the bit size a decoder checks a number against: 0 for int,
// uint and uintptr, whose size is the platform's.
func size(t types.Type) int {
	switch types.Unalias(t).Underlying().(*types.Basic).Kind() {
	case types.Int8, types.Uint8:
		return 8
	case types.Int16, types.Uint16:
		return 16
	case types.Int32, types.Uint32, types.Float32:
		return 32
	case types.Int64, types.Uint64, types.Float64, types.Complex64:
		return 64
	case types.Complex128:
		return 128
	}
	return 0
}

// appendField returns the statements that append p, of type t, to b as
// field num of a message. With omit a zero value is left out, as a field
// of a struct is; without, it is always sent, as an element of a list is.
func (g *gen) appendField(b string, num int, t types.Type, p place, omit bool) []jen.Code {
	app := func(fn string, x jen.Code) *jen.Statement {
		return jen.Id(b).Op("=").Add(cd(fn)).Call(jen.Id(b), jen.Lit(num), x)
	}
	var stmt, nonZero jen.Code
	switch model.Classify(t) {
	case model.Bool:
		x := toBasic(t, types.Bool, p.val)
		stmt, nonZero = app("AppendBoolField", x), x
	case model.String:
		stmt, nonZero = app("AppendStringField", toBasic(t, types.String, p.val)), jen.Add(p.val).Op("!=").Lit("")
	case model.Int:
		stmt, nonZero = app("AppendVarintField", toBasic(t, types.Int64, p.val)), jen.Add(p.val).Op("!=").Lit(0)
	case model.Uint:
		stmt, nonZero = app("AppendUvarintField", toBasic(t, types.Uint64, p.val)), jen.Add(p.val).Op("!=").Lit(0)
	case model.Float:
		// By its bits, so that -0 is sent.
		x := toBasic(t, types.Float64, p.val)
		stmt, nonZero = app("AppendFloatField", x), jen.Qual("math", "Float64bits").Call(x).Op("!=").Lit(0)
	case model.Complex:
		stmt, nonZero = app("AppendComplexField", toBasic(t, types.Complex128, p.val)), jen.Add(p.val).Op("!=").Lit(0)
	case model.Bytes:
		stmt, nonZero = app("AppendBytesField", p.val), jen.Len(p.val).Op("!=").Lit(0)
	case model.Error:
		stmt, nonZero = app("AppendErrorField", p.val), jen.Add(p.val).Op("!=").Nil()
	case model.Time:
		stmt, nonZero = app("AppendTimeField", p.val), jen.Op("!").Add(cd("IsZeroTime")).Call(p.val)
	default:
		// A nested message, which its helper leaves out when it is empty.
		h := g.n.helper(t)
		return []jen.Code{jen.Id(b).Op("=").Id(h.append).Call(jen.Id(b), jen.Lit(num), jen.Lit(omit), p.addr())}
	}
	if !omit {
		return []jen.Code{stmt}
	}
	return []jen.Code{jen.If(nonZero).Block(stmt)}
}

// locals are the names a decoding function uses; fields are decoded in
// closures passed to codec.DecodeMessage, whose parameters are num, typ and
// in.
type locals struct{ num, typ, in, x, n, err, p, e string }

func newLocals(sc *scope) *locals {
	return &locals{
		num: sc.name("num"), typ: sc.name("typ"), in: sc.name("in"),
		x: sc.name("x"), n: sc.name("n"), err: sc.name("err"), p: sc.name("p"), e: sc.name("e"),
	}
}

// field is one case of a decoding closure: field num, of type t, named
// name in errors ("" to pass them on as they are), stored by store, which
// is given an expression of type t.
type field struct {
	num   int
	name  string
	t     types.Type
	store func(x jen.Code) []jen.Code
}

// assign stores a decoded value in p.
func assign(p place) func(jen.Code) []jen.Code {
	return func(x jen.Code) []jen.Code { return []jen.Code{jen.Add(p.val).Op("=").Add(x)} }
}

// decodeMessage returns a call of codec.DecodeMessage over src that decodes
// fields and skips every other.
func (g *gen) decodeMessage(l *locals, src jen.Code, fields []field) *jen.Statement {
	cases := make([]jen.Code, 0, len(fields))
	for _, f := range fields {
		cases = append(cases, jen.Case(jen.Lit(f.num)).Block(g.decodeField(l, f)...))
	}
	var body []jen.Code
	if len(cases) > 0 {
		body = append(body, jen.Switch(jen.Id(l.num)).Block(cases...))
	}
	body = append(body, jen.Return(cd("SkipField").Call(jen.Id(l.in), jen.Id(l.num), jen.Id(l.typ))))
	fn := jen.Func().Params(jen.Id(l.num).Add(cd("Number")), jen.Id(l.typ).Add(cd("WireType")), jen.Id(l.in).Index().Byte()).Params(jen.Int(), jen.Error()).Block(body...)
	return cd("DecodeMessage").Call(src, fn)
}

// decodeField returns the statements of one case of a decoding closure.
func (g *gen) decodeField(l *locals, f field) []jen.Code {
	fail := func() jen.Code {
		err := jen.Id(l.err)
		if f.name != "" {
			err = cd("WrapField").Call(jen.Lit(f.name), jen.Id(l.err))
		}
		return jen.If(jen.Id(l.err).Op("!=").Nil()).Block(jen.Return(jen.Lit(0), err))
	}
	consume := func(fn string, args ...jen.Code) []jen.Code {
		return []jen.Code{
			jen.List(jen.Id(l.x), jen.Id(l.n), jen.Id(l.err)).Op(":=").Add(cd(fn)).Call(append([]jen.Code{jen.Id(l.in), jen.Id(l.typ)}, args...)...),
			fail(),
		}
	}
	x := jen.Id(l.x)
	var body []jen.Code
	var val jen.Code
	t := f.t
	switch model.Classify(t) {
	case model.Bool:
		body, val = consume("ConsumeBoolField"), g.fromBasic(t, types.Bool, x)
	case model.String:
		body, val = consume("ConsumeStringField"), g.fromBasic(t, types.String, x)
	case model.Int:
		body, val = consume("ConsumeVarintField", jen.Lit(size(t))), g.fromBasic(t, types.Int64, x)
	case model.Uint:
		body, val = consume("ConsumeUvarintField", jen.Lit(size(t))), g.fromBasic(t, types.Uint64, x)
	case model.Float:
		body, val = consume("ConsumeFloatField", jen.Lit(size(t))), g.fromBasic(t, types.Float64, x)
	case model.Complex:
		body, val = consume("ConsumeComplexField", jen.Lit(size(t))), g.fromBasic(t, types.Complex128, x)
	case model.Bytes:
		// Copy: the input aliases a buffer the transport reuses.
		body = consume("ConsumeBytesField")
		val = jen.Append(jen.Index().Byte().Parens(jen.Nil()), x.Clone().Op("..."))
		if !types.Identical(t, types.NewSlice(types.Typ[types.Byte])) {
			val = jen.Add(g.typ(t)).Call(val)
		}
	case model.Error:
		body, val = consume("ConsumeErrorField"), x
	case model.Time:
		body, val = consume("ConsumeTimeField"), x
	default:
		h := g.n.helper(t)
		body = []jen.Code{
			jen.List(jen.Id(l.p), jen.Id(l.n), jen.Id(l.err)).Op(":=").Add(cd("ConsumeBytesField")).Call(jen.Id(l.in), jen.Id(l.typ)),
			fail(),
			jen.Var().Id(l.e).Add(g.typ(t)),
			jen.If(jen.Id(l.err).Op("=").Id(h.read).Call(jen.Id(l.p), jen.Op("&").Id(l.e)), jen.Id(l.err).Op("!=").Nil()).Block(
				jen.Return(jen.Lit(0), func() jen.Code {
					if f.name == "" {
						return jen.Id(l.err)
					}
					return cd("WrapField").Call(jen.Lit(f.name), jen.Id(l.err))
				}()),
			),
		}
		val = jen.Id(l.e)
	}
	body = append(body, f.store(val)...)
	return append(body, jen.Return(jen.Id(l.n), jen.Nil()))
}

// codec emits the encode and decode functions of every type that has one.
func (g *gen) codec() {
	for _, t := range g.svc.Codec {
		g.appendHelper(t)
		g.readHelper(t)
	}
	g.errorCodecs()
}

// A type with a helper travels as a nested message: its helper appends
// field num, whose value is the message, and its reader decodes the
// message. A struct's message has a field per struct field, numbered as
// the schema records; a pointer's has field 1 when it is not nil; a
// slice's or array's field 1 once per element; a map's field 1 once per
// entry, a message with the key as field 1 and the value as field 2; a
// BinaryMarshaler's the bytes as field 1, or the error it returned as field
// 2.

func (g *gen) appendHelper(t types.Type) {
	h := g.n.helper(t)
	sc := newScope(g.n.file)
	b, num, omit, v, mark := sc.name("b"), sc.name("num"), sc.name("omit"), sc.name("v"), sc.name("mark")
	self := place{val: jen.Op("*").Id(v), ptr: jen.Id(v)}
	body := []jen.Code{
		jen.List(jen.Id(b), jen.Id(mark)).Op(":=").Add(cd("BeginMessage")).Call(jen.Id(b), jen.Id(num)),
	}
	u := types.Unalias(t).Underlying()
	switch enc := model.Classify(t); enc {
	case model.Marshaler:
		p, err := sc.name("p"), sc.name("err")
		body = append(body,
			jen.If(jen.List(jen.Id(p), jen.Id(err)).Op(":=").Id(v).Dot("MarshalBinary").Call(), jen.Id(err).Op("!=").Nil()).Block(
				jen.Comment("The decoder reports the message as its error."),
				jen.Id(b).Op("=").Add(cd("AppendStringField")).Call(jen.Id(b), jen.Lit(2), jen.Id(err).Dot("Error").Call()),
			).Else().Block(
				jen.Id(b).Op("=").Add(cd("AppendBytesField")).Call(jen.Id(b), jen.Lit(1), jen.Id(p)),
			),
		)
	case model.Struct:
		s := u.(*types.Struct)
		nums := g.svc.FieldNumbers(t)
		i := 0
		for f := range model.EncodedFields(s) {
			body = append(body, g.appendField(b, nums[i], f.Type(), place{val: jen.Id(v).Dot(f.Name())}, true)...)
			i++
		}
	case model.Pointer:
		elem := u.(*types.Pointer).Elem()
		body = append(body, jen.If(jen.Op("*").Id(v).Op("!=").Nil()).Block(
			g.appendField(b, 1, elem, place{val: jen.Op("**").Id(v), ptr: jen.Op("*").Id(v)}, false)...,
		))
	case model.Slice, model.Array:
		var elem types.Type
		var at jen.Code
		i := sc.name("i")
		if enc == model.Slice {
			elem = u.(*types.Slice).Elem()
			at = jen.Parens(jen.Op("*").Id(v)).Index(jen.Id(i))
		} else {
			elem = u.(*types.Array).Elem()
			at = jen.Id(v).Index(jen.Id(i))
		}
		body = append(body, jen.For(jen.Id(i).Op(":=").Range().Add(self.val)).Block(g.appendField(b, 1, elem, place{val: at}, false)...))
	case model.Map:
		m := u.(*types.Map)
		k, e, entry := sc.name("k"), sc.name("e"), sc.name("entry")
		loop := []jen.Code{
			jen.Var().Id(entry).Int(),
			jen.List(jen.Id(b), jen.Id(entry)).Op("=").Add(cd("BeginMessage")).Call(jen.Id(b), jen.Lit(1)),
		}
		loop = append(loop, g.appendField(b, 1, m.Key(), place{val: jen.Id(k)}, true)...)
		loop = append(loop, g.appendField(b, 2, m.Elem(), place{val: jen.Id(e)}, true)...)
		loop = append(loop, jen.Id(b).Op("=").Add(cd("EndMessage")).Call(jen.Id(b), jen.Id(entry), jen.Lit(1), jen.False()))
		body = append(body, jen.For(jen.List(jen.Id(k), jen.Id(e)).Op(":=").Range().Add(self.val)).Block(loop...))
	}
	body = append(body, jen.Return(cd("EndMessage").Call(jen.Id(b), jen.Id(mark), jen.Id(num), jen.Id(omit))))
	g.f.Func().Id(h.append).Params(jen.Id(b).Index().Byte(), jen.Id(num).Add(cd("Number")), jen.Id(omit).Bool(), jen.Id(v).Op("*").Add(g.typ(t))).Index().Byte().Block(body...)
	g.f.Line()
}

func (g *gen) readHelper(t types.Type) {
	h := g.n.helper(t)
	sc := newScope(g.n.file)
	b, v := sc.name("b"), sc.name("v")
	var body []jen.Code
	var fields []field
	u := types.Unalias(t).Underlying()
	switch enc := model.Classify(t); enc {
	case model.Marshaler:
		l := newLocals(sc)
		fields = []field{
			{num: 1, t: types.NewSlice(types.Typ[types.Byte]), store: func(x jen.Code) []jen.Code {
				return []jen.Code{jen.If(jen.Id(l.err).Op("=").Id(v).Dot("UnmarshalBinary").Call(x), jen.Id(l.err).Op("!=").Nil()).Block(
					jen.Return(jen.Lit(0), jen.Id(l.err)),
				)}
			}},
			{num: 2, t: types.Typ[types.String], store: func(x jen.Code) []jen.Code {
				return []jen.Code{jen.Return(jen.Lit(0), jen.Qual("errors", "New").Call(
					jen.Lit("the sender could not marshal "+types.TypeString(t, types.RelativeTo(g.file.Pkg))+": ").Op("+").Add(x)))}
			}},
		}
		body = append(body, jen.Return(g.decodeMessage(l, jen.Id(b), fields)))
	case model.Struct:
		s := u.(*types.Struct)
		nums := g.svc.FieldNumbers(t)
		i := 0
		for f := range model.EncodedFields(s) {
			fields = append(fields, field{num: nums[i], name: f.Name(), t: f.Type(), store: assign(place{val: jen.Id(v).Dot(f.Name())})})
			i++
		}
		body = append(body, jen.Return(g.decodeMessage(newLocals(sc), jen.Id(b), fields)))
	case model.Pointer:
		elem := u.(*types.Pointer).Elem()
		l := newLocals(sc)
		fields = []field{{num: 1, t: elem, store: func(x jen.Code) []jen.Code {
			return []jen.Code{
				jen.Op("*").Id(v).Op("=").New(g.typ(elem)),
				jen.Op("**").Id(v).Op("=").Add(x),
			}
		}}}
		body = append(body, jen.Return(g.decodeMessage(l, jen.Id(b), fields)))
	case model.Slice:
		elem := u.(*types.Slice).Elem()
		fields = []field{{num: 1, t: elem, store: func(x jen.Code) []jen.Code {
			return []jen.Code{jen.Op("*").Id(v).Op("=").Append(jen.Op("*").Id(v), x)}
		}}}
		body = append(body, jen.Return(g.decodeMessage(newLocals(sc), jen.Id(b), fields)))
	case model.Array:
		a := u.(*types.Array)
		i := sc.name("i")
		fields = []field{{num: 1, t: a.Elem(), store: func(x jen.Code) []jen.Code {
			return []jen.Code{
				jen.If(jen.Id(i).Op(">=").Len(jen.Id(v))).Block(
					jen.Return(jen.Lit(0), jen.Qual("errors", "New").Call(jen.Lit("more than "+strconv.FormatInt(a.Len(), 10)+" elements for "+types.TypeString(t, types.RelativeTo(g.file.Pkg))))),
				),
				jen.Id(v).Index(jen.Id(i)).Op("=").Add(x),
				jen.Id(i).Op("++"),
			}
		}}}
		body = append(body, jen.Id(i).Op(":=").Lit(0), jen.Return(g.decodeMessage(newLocals(sc), jen.Id(b), fields)))
	case model.Map:
		m := u.(*types.Map)
		k, e := sc.name("k"), sc.name("e")
		outer := newLocals(sc)
		inner := newLocals(sc)
		entry := []field{
			{num: 1, t: m.Key(), store: assign(place{val: jen.Id(k)})},
			{num: 2, t: m.Elem(), store: assign(place{val: jen.Id(e)})},
		}
		caseBody := []jen.Code{
			jen.List(jen.Id(outer.p), jen.Id(outer.n), jen.Id(outer.err)).Op(":=").Add(cd("ConsumeBytesField")).Call(jen.Id(outer.in), jen.Id(outer.typ)),
			jen.If(jen.Id(outer.err).Op("!=").Nil()).Block(jen.Return(jen.Lit(0), jen.Id(outer.err))),
			jen.Var().Id(k).Add(g.typ(m.Key())),
			jen.Var().Id(e).Add(g.typ(m.Elem())),
			jen.If(jen.Id(outer.err).Op("=").Add(g.decodeMessage(inner, jen.Id(outer.p), entry)), jen.Id(outer.err).Op("!=").Nil()).Block(
				jen.Return(jen.Lit(0), jen.Id(outer.err)),
			),
			jen.If(jen.Op("*").Id(v).Op("==").Nil()).Block(jen.Op("*").Id(v).Op("=").Make(g.typ(t))),
			jen.Parens(jen.Op("*").Id(v)).Index(jen.Id(k)).Op("=").Id(e),
			jen.Return(jen.Id(outer.n), jen.Nil()),
		}
		fn := jen.Func().Params(jen.Id(outer.num).Add(cd("Number")), jen.Id(outer.typ).Add(cd("WireType")), jen.Id(outer.in).Index().Byte()).Params(jen.Int(), jen.Error()).Block(
			jen.If(jen.Id(outer.num).Op("==").Lit(1)).Block(caseBody...),
			jen.Return(cd("SkipField").Call(jen.Id(outer.in), jen.Id(outer.num), jen.Id(outer.typ))),
		)
		body = append(body, jen.Return(cd("DecodeMessage").Call(jen.Id(b), fn)))
	}
	g.f.Func().Id(h.read).Params(jen.Id(b).Index().Byte(), jen.Id(v).Op("*").Add(g.typ(t))).Error().Block(body...)
	g.f.Line()
}
