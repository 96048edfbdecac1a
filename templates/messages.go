package templates

import (
	"github.com/dave/jennifer/jen"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// messages emits, per method, the argument and reply structs and their
// codec.Message methods.
func (g *gen) messages() {
	for _, m := range g.svc.Methods {
		mn := g.n.methods[m]
		g.message(mn.args, "the arguments of "+g.svc.Name+"."+m.Name, m.Params, mn.fields)
		g.message(mn.reply, "the results of "+g.svc.Name+"."+m.Name, m.Results, mn.results)
	}
}

func (g *gen) message(name, what string, vars []*model.Var, fields []string) {
	decl := make([]jen.Code, len(vars))
	for i, v := range vars {
		decl[i] = jen.Id(fields[i]).Add(g.typ(v.Type))
	}
	g.f.Commentf("%s carries %s.", name, what)
	g.f.Type().Id(name).Struct(decl...)
	g.f.Line()

	// Parameters and results are fields 1, 2, ... in order.
	sc := newScope(g.n.file)
	recv, b := sc.name("m"), sc.name("b")
	var enc []jen.Code
	for i, v := range vars {
		enc = append(enc, g.appendField(b, i+1, v.Type, place{val: jen.Id(recv).Dot(fields[i])}, true)...)
	}
	enc = append(enc, jen.Return(jen.Id(b)))
	g.f.Comment("AppendFF implements codec.Message.")
	g.f.Func().Params(jen.Id(recv).Op("*").Id(name)).Id("AppendFF").Params(jen.Id(b).Index().Byte()).Index().Byte().Block(enc...)
	g.f.Line()

	sc = newScope(g.n.file)
	recv, b = sc.name("m"), sc.name("b")
	dec := []jen.Code{jen.Op("*").Id(recv).Op("=").Id(name).Values()}
	msg := make([]field, len(vars))
	for i, v := range vars {
		msg[i] = field{num: i + 1, name: fields[i], t: v.Type, store: assign(place{val: jen.Id(recv).Dot(fields[i])})}
	}
	dec = append(dec, jen.Return(g.decodeMessage(newLocals(sc), jen.Id(b), msg)))
	g.f.Comment("UnmarshalFF implements codec.Message.")
	g.f.Func().Params(jen.Id(recv).Op("*").Id(name)).Id("UnmarshalFF").Params(jen.Id(b).Index().Byte()).Error().Block(dec...)
	g.f.Line()
}
