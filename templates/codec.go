package templates

import (
	"go/types"

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

// reader names the *codec.Reader in scope; byValue says it is a
// codec.Reader variable, whose address helpers need.
type reader struct {
	name    string
	byValue bool
}

func (r reader) call(method string) *jen.Statement { return jen.Id(r.name).Dot(method).Call() }

func (r reader) ptr() jen.Code {
	if r.byValue {
		return jen.Op("&").Id(r.name)
	}
	return jen.Id(r.name)
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

// appendValue returns the statements that append p, of type t, to b.
func (g *gen) appendValue(b string, t types.Type, p place) []jen.Code {
	app := func(fn string, x jen.Code) jen.Code {
		return jen.Id(b).Op("=").Add(cd(fn)).Call(jen.Id(b), x)
	}
	switch model.Classify(t) {
	case model.Bool:
		return []jen.Code{app("AppendBool", toBasic(t, types.Bool, p.val))}
	case model.String:
		return []jen.Code{app("AppendString", toBasic(t, types.String, p.val))}
	case model.Int:
		return []jen.Code{app("AppendVarint", toBasic(t, types.Int64, p.val))}
	case model.Uint:
		return []jen.Code{app("AppendUvarint", toBasic(t, types.Uint64, p.val))}
	case model.Float:
		return []jen.Code{app("AppendFloat64", toBasic(t, types.Float64, p.val))}
	case model.Complex:
		return []jen.Code{
			app("AppendFloat64", jen.Id("float64").Call(jen.Real(p.val))),
			app("AppendFloat64", jen.Id("float64").Call(jen.Imag(p.val))),
		}
	case model.Bytes:
		return []jen.Code{app("AppendBytes", p.val)}
	case model.Error:
		return []jen.Code{app("AppendError", p.val)}
	case model.Time:
		return []jen.Code{app("AppendTime", p.val)}
	}
	h := g.n.helper(t)
	return []jen.Code{jen.Id(b).Op("=").Id(h.append).Call(jen.Id(b), p.addr())}
}

// readValue returns the statements that decode into p, of type t.
func (g *gen) readValue(r reader, t types.Type, p place) []jen.Code {
	if x := g.readExpr(r, t); x != nil {
		return []jen.Code{jen.Add(p.val).Op("=").Add(x)}
	}
	h := g.n.helper(t)
	return []jen.Code{jen.Id(h.read).Call(r.ptr(), p.addr())}
}

// readExpr returns an expression of type t that decodes one value, or nil
// when t needs statements (a type with its own helper).
func (g *gen) readExpr(r reader, t types.Type) jen.Code {
	switch model.Classify(t) {
	case model.Error:
		return cd("ReadError").Call(r.ptr())
	case model.Time:
		return cd("ReadTime").Call(r.ptr())
	case model.Bool:
		return g.fromBasic(t, types.Bool, r.call("Bool"))
	case model.String:
		return g.fromBasic(t, types.String, r.call("String"))
	case model.Int:
		return g.fromBasic(t, types.Int64, r.call("Varint"))
	case model.Uint:
		return g.fromBasic(t, types.Uint64, r.call("Uvarint"))
	case model.Float:
		return g.fromBasic(t, types.Float64, r.call("Float64"))
	case model.Complex:
		return g.fromBasic(t, types.Complex128, jen.Complex(r.call("Float64"), r.call("Float64")))
	case model.Bytes:
		// Copy: the reader aliases a buffer the transport reuses.
		cp := jen.Append(jen.Index().Byte().Parens(jen.Nil()), r.call("Bytes").Op("..."))
		if types.Identical(t, types.NewSlice(types.Typ[types.Byte])) {
			return cp
		}
		return jen.Add(g.typ(t)).Call(cp)
	}
	return nil
}

// readLocal returns the statements that declare the local name, of type t,
// and decode into it: a short declaration where one expression does.
func (g *gen) readLocal(r reader, t types.Type, name string) []jen.Code {
	if x := g.readExpr(r, t); x != nil {
		return []jen.Code{jen.Id(name).Op(":=").Add(x)}
	}
	return append([]jen.Code{jen.Var().Id(name).Add(g.typ(t))}, g.readValue(r, t, place{val: jen.Id(name)})...)
}

// codec emits the encode and decode functions of every type that has one.
func (g *gen) codec() {
	for _, t := range g.svc.Codec {
		g.appendHelper(t)
		g.readHelper(t)
	}
	g.errorCodecs()
}

func (g *gen) appendHelper(t types.Type) {
	h := g.n.helper(t)
	sc := newScope(g.n.file)
	b, v := sc.name("b"), sc.name("v")
	self := place{val: jen.Op("*").Id(v), ptr: jen.Id(v)}
	var body []jen.Code
	u := types.Unalias(t).Underlying()
	switch enc := model.Classify(t); enc {
	case model.Marshaler:
		p, err := sc.name("p"), sc.name("err")
		body = append(body,
			jen.List(jen.Id(p), jen.Id(err)).Op(":=").Id(v).Dot("MarshalBinary").Call(),
			jen.If(jen.Id(err).Op("!=").Nil()).Block(
				jen.Comment("The decoder reports the message as its error."),
				jen.Id(b).Op("=").Append(jen.Id(b), jen.Lit(1)),
				jen.Return(cd("AppendString").Call(jen.Id(b), jen.Id(err).Dot("Error").Call())),
			),
			jen.Id(b).Op("=").Append(jen.Id(b), jen.Lit(0)),
			jen.Return(cd("AppendBytes").Call(jen.Id(b), jen.Id(p))),
		)
	case model.Struct:
		s := u.(*types.Struct)
		for f := range model.EncodedFields(s) {
			body = append(body, g.appendValue(b, f.Type(), place{val: jen.Id(v).Dot(f.Name())})...)
		}
		body = append(body, jen.Return(jen.Id(b)))
	case model.Pointer:
		elem := u.(*types.Pointer).Elem()
		body = append(body,
			jen.If(jen.Op("*").Id(v).Op("==").Nil()).Block(jen.Return(jen.Append(jen.Id(b), jen.Lit(0)))),
			jen.Id(b).Op("=").Append(jen.Id(b), jen.Lit(1)),
		)
		body = append(body, g.appendValue(b, elem, place{val: jen.Op("**").Id(v), ptr: jen.Op("*").Id(v)})...)
		body = append(body, jen.Return(jen.Id(b)))
	case model.Slice, model.Array:
		var elem types.Type
		var at jen.Code
		i := sc.name("i")
		if enc == model.Slice {
			elem = u.(*types.Slice).Elem()
			body = append(body, jen.Id(b).Op("=").Add(cd("AppendUvarint")).Call(jen.Id(b), jen.Uint64().Call(jen.Len(self.val))))
			at = jen.Parens(jen.Op("*").Id(v)).Index(jen.Id(i))
		} else {
			elem = u.(*types.Array).Elem()
			at = jen.Id(v).Index(jen.Id(i))
		}
		body = append(body,
			jen.For(jen.Id(i).Op(":=").Range().Add(self.val)).Block(g.appendValue(b, elem, place{val: at})...),
			jen.Return(jen.Id(b)),
		)
	case model.Map:
		m := u.(*types.Map)
		k, e := sc.name("k"), sc.name("e")
		body = append(body,
			jen.Id(b).Op("=").Add(cd("AppendUvarint")).Call(jen.Id(b), jen.Uint64().Call(jen.Len(self.val))),
			jen.For(jen.List(jen.Id(k), jen.Id(e)).Op(":=").Range().Add(self.val)).Block(
				append(g.appendValue(b, m.Key(), place{val: jen.Id(k)}), g.appendValue(b, m.Elem(), place{val: jen.Id(e)})...)...,
			),
			jen.Return(jen.Id(b)),
		)
	}
	g.f.Func().Id(h.append).Params(jen.Id(b).Index().Byte(), jen.Id(v).Op("*").Add(g.typ(t))).Index().Byte().Block(body...)
	g.f.Line()
}

func (g *gen) readHelper(t types.Type) {
	h := g.n.helper(t)
	sc := newScope(g.n.file)
	rn, v := sc.name("r"), sc.name("v")
	r := reader{name: rn}
	self := place{val: jen.Op("*").Id(v), ptr: jen.Id(v)}
	var body []jen.Code
	u := types.Unalias(t).Underlying()
	switch enc := model.Classify(t); enc {
	case model.Marshaler:
		err := sc.name("err")
		body = append(body, jen.Switch(r.call("Byte")).Block(
			jen.Case(jen.Lit(0)).Block(
				jen.If(jen.Id(err).Op(":=").Id(v).Dot("UnmarshalBinary").Call(r.call("Bytes")), jen.Id(err).Op("!=").Nil()).Block(
					jen.Id(rn).Dot("Fail").Call(jen.Id(err)),
				),
			),
			jen.Case(jen.Lit(1)).Block(
				jen.Id(rn).Dot("Fail").Call(jen.Qual("errors", "New").Call(
					jen.Lit("codec: the sender could not marshal "+types.TypeString(t, types.RelativeTo(g.file.Pkg))+": ").Op("+").Add(r.call("String")))),
			),
			jen.Default().Block(
				jen.Id(rn).Dot("Fail").Call(jen.Qual("errors", "New").Call(jen.Lit("codec: bad marshaler flag"))),
			),
		))
	case model.Struct:
		s := u.(*types.Struct)
		for f := range model.EncodedFields(s) {
			body = append(body, g.readValue(r, f.Type(), place{val: jen.Id(v).Dot(f.Name())})...)
		}
	case model.Pointer:
		elem := u.(*types.Pointer).Elem()
		body = append(body,
			jen.If(jen.Op("!").Add(r.call("Bool"))).Block(
				jen.Op("*").Id(v).Op("=").Nil(),
				jen.Return(),
			),
			jen.Op("*").Id(v).Op("=").New(g.typ(elem)),
		)
		body = append(body, g.readValue(r, elem, place{val: jen.Op("**").Id(v), ptr: jen.Op("*").Id(v)})...)
	case model.Slice:
		elem := u.(*types.Slice).Elem()
		n, i := sc.name("n"), sc.name("i")
		body = append(body,
			jen.Id(n).Op(":=").Add(r.call("Len32")),
			jen.If(jen.Id(n).Op("==").Lit(0)).Block(
				jen.Op("*").Id(v).Op("=").Nil(),
				jen.Return(),
			),
			jen.Op("*").Id(v).Op("=").Make(g.typ(t), jen.Id(n)),
			jen.For(jen.Id(i).Op(":=").Range().Add(self.val)).Block(
				g.readValue(r, elem, place{val: jen.Parens(jen.Op("*").Id(v)).Index(jen.Id(i))})...,
			),
		)
	case model.Array:
		elem := u.(*types.Array).Elem()
		i := sc.name("i")
		body = append(body,
			jen.For(jen.Id(i).Op(":=").Range().Id(v)).Block(
				g.readValue(r, elem, place{val: jen.Id(v).Index(jen.Id(i))})...,
			),
		)
	case model.Map:
		m := u.(*types.Map)
		n, k, e := sc.name("n"), sc.name("k"), sc.name("e")
		loop := g.readLocal(r, m.Key(), k)
		loop = append(loop, g.readLocal(r, m.Elem(), e)...)
		loop = append(loop, jen.Parens(jen.Op("*").Id(v)).Index(jen.Id(k)).Op("=").Id(e))
		body = append(body,
			jen.Id(n).Op(":=").Add(r.call("Len32")),
			jen.If(jen.Id(n).Op("==").Lit(0)).Block(
				jen.Op("*").Id(v).Op("=").Nil(),
				jen.Return(),
			),
			jen.Op("*").Id(v).Op("=").Make(g.typ(t), jen.Id(n)),
			jen.For(jen.Range().Id(n)).Block(loop...),
		)
	}
	g.f.Func().Id(h.read).Params(jen.Id(rn).Op("*").Add(cd("Reader")), jen.Id(v).Op("*").Add(g.typ(t))).Block(body...)
	g.f.Line()
}
