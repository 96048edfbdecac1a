package templates

import (
	"fmt"
	"go/types"
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// descriptor emits the service descriptor and one method descriptor per
// method: data for the runtime, with small closures for the typed parts.
func (g *gen) descriptor() {
	methods := make([]jen.Code, len(g.svc.Methods))
	for i, m := range g.svc.Methods {
		methods[i] = jen.Id(g.n.methods[m].desc)
	}
	g.f.Commentf("%s describes the service %s to the runtime.", g.n.desc, g.svc.Name)
	g.f.Var().Id(g.n.desc).Op("=").Op("&").Add(rt("ServiceDesc")).Values(multiline([]jen.Code{
		kv("Name", jen.Lit(g.svc.Wire)),
		kv("Methods", jen.Index().Op("*").Add(rt("MethodDesc")).Values(multiline(methods)...)),
	})...)
	g.f.Line()
	g.errorRules()
	for _, m := range g.svc.Methods {
		g.methodDesc(m)
	}
}

func (g *gen) methodDesc(m *model.Method) {
	mn := g.n.methods[m]
	// Fields in the order of runtime.MethodDesc; zero values left out.
	fields := []jen.Code{
		jen.Id("Service").Op(":").Lit(g.svc.Wire),
		jen.Id("Name").Op(":").Lit(m.Name),
	}
	switch m.Mode {
	case model.Scatter:
		fields = append(fields, jen.Id("Mode").Op(":").Add(rt("ModeScatter")))
	case model.Hedge:
		fields = append(fields,
			jen.Id("Mode").Op(":").Add(rt("ModeHedge")),
			jen.Id("Hedge").Op(":").Add(duration(m.Hedge)))
	}
	if m.Hold {
		fields = append(fields, jen.Id("Hold").Op(":").True())
	}
	if m.Linearizable {
		fields = append(fields, jen.Id("Linearizable").Op(":").True())
	}
	if s := g.settings(m); s != nil {
		fields = append(fields, jen.Id("Settings").Op(":").Add(s))
	}
	if m.DefaultFailover {
		fields = append(fields, jen.Id("Default").Op(":").Add(rt("Failover")))
	}
	if len(m.Errors) > 0 {
		fields = append(fields, jen.Id("Errors").Op(":").Add(g.methodErrors(m)))
	}
	fields = append(fields,
		jen.Id("Entities").Op(":").Add(g.entities(m)),
		jen.Id("NewArgs").Op(":").Func().Params().Add(cd("Message")).Block(
			jen.Return(jen.New(jen.Id(mn.args))),
		),
		jen.Id("Handle").Op(":").Add(g.handle(m)),
		jen.Id("Schema").Op(":").Add(g.schema(m)),
	)
	g.f.Var().Id(mn.desc).Op("=").Op("&").Add(rt("MethodDesc")).Values(multiline(fields)...)
	g.f.Line()
}

// schema is the method's runtime.MethodSchema, derived from the schema
// recorded at the end of the file.
func (g *gen) schema(m *model.Method) jen.Code {
	var d []jen.Code
	if m.Schema.Compat != 0 {
		d = append(d, kv("Compat", jen.Lit(int(m.Schema.Compat))))
	}
	d = append(d, kv("Args", jen.Id(fmt.Sprintf("%#016x", m.Schema.Args))))
	if len(m.Schema.Fields) > 0 {
		var fs []jen.Code
		for _, f := range m.Schema.Fields {
			fs = append(fs, jen.Lit(f))
		}
		d = append(d, kv("Fields", jen.Index().String().Values(multiline(fs)...)))
		return rt("MethodSchema").Values(multiline(d)...)
	}
	return rt("MethodSchema").Values(d...)
}

// kv is one field of a keyed composite literal; unlike jen.Dict, a list of
// them keeps the order given.
func kv(key string, val jen.Code) jen.Code { return jen.Id(key).Op(":").Add(val) }

// multiline makes a composite literal put one element per line.
func multiline(elems []jen.Code) []jen.Code {
	out := make([]jen.Code, 0, len(elems)+1)
	for _, e := range elems {
		out = append(out, jen.Line().Add(e))
	}
	return append(out, jen.Line())
}

func (g *gen) settings(m *model.Method) jen.Code {
	var d []jen.Code
	if m.AttemptTimeout > 0 {
		d = append(d, kv("AttemptTimeout", duration(m.AttemptTimeout)))
	}
	if m.OperationTimeout > 0 {
		d = append(d, kv("OperationTimeout", duration(m.OperationTimeout)))
	}
	if m.HeartbeatTimeout > 0 {
		d = append(d, kv("HeartbeatTimeout", duration(m.HeartbeatTimeout)))
	}
	if m.MaxFailovers != nil {
		d = append(d, kv("MaxFailovers", jen.New(jen.Lit(*m.MaxFailovers))))
	}
	if len(d) == 0 {
		return nil
	}
	return rt("MethodSettings").Values(multiline(d)...)
}

// entities emits the extractor: the value at each path, as a string.
func (g *gen) entities(m *model.Method) jen.Code {
	mn := g.n.methods[m]
	sc := newScope(g.n.file)
	args, dst := sc.name("args"), sc.name("dst")
	a := sc.name("a")
	body := []jen.Code{jen.Id(a).Op(":=").Id(args).Assert(jen.Op("*").Id(mn.args))}
	for _, e := range m.Entities {
		body = append(body, g.entity(sc, m, e, jen.Id(a).Dot(mn.fields[e.Param]), dst)...)
	}
	body = append(body, jen.Return(jen.Id(dst)))
	return jen.Func().Params(jen.Id(args).Add(cd("Message")), jen.Id(dst).Index().String()).Index().String().Block(body...)
}

// entity appends one entity ID to dst; a nil pointer on the path gives "".
func (g *gen) entity(sc *scope, m *model.Method, e *model.Entity, start jen.Code, dst string) []jen.Code {
	type check struct {
		name string
		expr jen.Code
	}
	var checks []check // pointers on the path, each tested for nil
	t := m.Params[e.Param].Type
	cur := jen.Add(start)
	ptrVar := false // cur is the last checked pointer
	for _, s := range e.Steps {
		if s.Deref {
			expr := jen.Code(cur)
			if ptrVar {
				expr = jen.Op("*").Add(cur)
			}
			p := sc.name("p")
			checks = append(checks, check{p, expr})
			cur, ptrVar = jen.Id(p), true
			t = t.Underlying().(*types.Pointer).Elem()
			continue
		}
		cur, ptrVar = jen.Add(cur).Dot(s.Field), false
		t = fieldType(t, s.Field)
	}
	if ptrVar {
		cur = jen.Op("*").Add(cur)
	}
	id := g.entityString(t, e.Kind, cur)
	if len(checks) == 0 {
		return []jen.Code{jen.Id(dst).Op("=").Append(jen.Id(dst), id)}
	}
	idVar := sc.name("id")
	inner := jen.Id(idVar).Op("=").Add(id)
	for i := len(checks) - 1; i >= 0; i-- {
		c := checks[i]
		inner = jen.If(jen.Id(c.name).Op(":=").Add(c.expr), jen.Id(c.name).Op("!=").Nil()).Block(inner)
	}
	return []jen.Code{
		jen.Var().Id(idVar).String(),
		inner,
		jen.Id(dst).Op("=").Append(jen.Id(dst), jen.Id(idVar)),
	}
}

func fieldType(t types.Type, name string) types.Type {
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, name)
	if obj == nil {
		// Unexported fields need the package; the generator has checked
		// the path, so search the struct directly.
		if s, ok := t.Underlying().(*types.Struct); ok {
			for i := range s.NumFields() {
				if s.Field(i).Name() == name {
					return s.Field(i).Type()
				}
			}
		}
		return types.Typ[types.Invalid]
	}
	return obj.Type()
}

// entityString converts x, of type t, to its entity ID.
func (g *gen) entityString(t types.Type, k model.EntityKind, x jen.Code) jen.Code {
	switch k {
	case model.EntityInt:
		return jen.Qual("strconv", "FormatInt").Call(toBasic(t, types.Int64, x), jen.Lit(10))
	case model.EntityUint:
		return jen.Qual("strconv", "FormatUint").Call(toBasic(t, types.Uint64, x), jen.Lit(10))
	}
	return toBasic(t, types.String, x)
}

// handle emits the server side of one method: unpack, call impl, pack.
func (g *gen) handle(m *model.Method) jen.Code {
	mn := g.n.methods[m]
	sc := newScope(g.n.file)
	ctx, impl, args := sc.name("ctx"), sc.name("impl"), sc.name("args")
	a, err := sc.name("a"), sc.name("err")
	call := make([]jen.Code, 0, len(m.Params)+1)
	call = append(call, jen.Id(ctx))
	for i := range m.Params {
		arg := jen.Id(a).Dot(mn.fields[i])
		if m.Variadic && i == len(m.Params)-1 {
			arg.Op("...")
		}
		call = append(call, arg)
	}
	var results []jen.Code
	var reply []jen.Code
	for i := range m.Results {
		r := sc.name("r" + strconv.Itoa(i))
		results = append(results, jen.Id(r))
		reply = append(reply, kv(mn.results[i], jen.Id(r)))
	}
	results = append(results, jen.Id(err))
	return jen.Func().Params(
		jen.Id(ctx).Qual("context", "Context"),
		jen.Id(impl).Any(),
		jen.Id(args).Add(cd("Message")),
	).Params(cd("Message"), jen.Error()).Block(
		jen.Id(a).Op(":=").Id(args).Assert(jen.Op("*").Id(mn.args)),
		jen.List(results...).Op(":=").Id(impl).Assert(g.qual(g.svc.Type.Obj())).Dot(m.Name).Call(call...),
		jen.If(jen.Id(err).Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Id(err))),
		jen.Return(jen.Op("&").Id(mn.reply).Values(reply...), jen.Nil()),
	)
}
