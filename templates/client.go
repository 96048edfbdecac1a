package templates

import (
	"go/types"
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// client emits the typed client: one method per service method, each
// packing its arguments and calling runtime.Client.Invoke.
func (g *gen) client() {
	n := g.n
	g.f.Commentf("%s calls %s through a runtime.Client; it implements %s.", n.client, g.svc.Name, g.svc.Name)
	g.f.Type().Id(n.client).Struct(jen.Id(n.clientField).Op("*").Add(rt("Client")))
	g.f.Line()
	g.f.Var().Id("_").Add(g.qual(g.svc.Type.Obj())).Op("=").Parens(jen.Op("*").Id(n.client)).Parens(jen.Nil())
	g.f.Line()
	sc := newScope(n.file)
	c := sc.name("c")
	g.f.Commentf("%s returns a client of %s that sends its calls through c.", n.newClient, g.svc.Name)
	g.f.Func().Id(n.newClient).Params(jen.Id(c).Op("*").Add(rt("Client"))).Op("*").Id(n.client).Block(
		jen.Return(jen.Op("&").Id(n.client).Values(jen.Dict{jen.Id(n.clientField): jen.Id(c)})),
	)
	g.f.Line()
	recv := g.clientRecv()
	for _, m := range g.svc.Methods {
		g.clientMethod(m, recv)
	}
}

// clientRecv picks the receiver name of every client method: one name for
// all of them, free of the file's names and of every parameter and result
// name the methods keep.
func (g *gen) clientRecv() string {
	sc := newScope(g.n.file)
	for _, m := range g.svc.Methods {
		sc.reserve(m.CtxName)
		sc.reserve(m.ErrName)
		for _, p := range m.Params {
			sc.reserve(p.Name)
		}
		for _, r := range m.Results {
			sc.reserve(r.Name)
		}
	}
	return sc.name("c")
}

// keep returns name for a parameter of generated code when it is usable
// and shadows nothing the body refers to, and a fresh name otherwise.
func keep(sc *scope, name, fallback string) string {
	if name == "" || name == "_" || sc.taken(name) {
		if name != "" && name != "_" {
			fallback = name
		}
		return sc.name(fallback)
	}
	sc.reserve(name)
	return name
}

func (g *gen) clientMethod(m *model.Method, recv string) {
	mn := g.n.methods[m]
	sc := newScope(g.n.file)
	sc.reserve(recv)
	ctx := keep(sc, m.CtxName, "ctx")
	params := []jen.Code{jen.Id(ctx).Qual("context", "Context")}
	var argVals []jen.Code
	for i, p := range m.Params {
		name := keep(sc, p.Name, "arg"+strconv.Itoa(i+1))
		t := g.typ(p.Type)
		if m.Variadic && i == len(m.Params)-1 {
			t = jen.Op("...").Add(g.typ(p.Type.(*types.Slice).Elem()))
		}
		params = append(params, jen.Id(name).Add(t))
		argVals = append(argVals, kv(mn.fields[i], jen.Id(name)))
	}
	named := m.ErrName != ""
	var results []jen.Code
	for _, r := range m.Results {
		if named {
			name := r.Name
			if name != "_" {
				name = keep(sc, name, "r")
			}
			results = append(results, jen.Id(name).Add(g.typ(r.Type)))
		} else {
			results = append(results, g.typ(r.Type))
		}
	}
	if named {
		name := m.ErrName
		if name != "_" {
			name = keep(sc, name, "err")
		}
		results = append(results, jen.Id(name).Error())
	} else {
		results = append(results, jen.Error())
	}
	args, reply, err := sc.name("args"), sc.name("reply"), sc.name("err")
	invoke := jen.Id(recv).Dot(g.n.clientField).Dot("Invoke").Call(
		jen.Id(ctx), jen.Id(mn.desc), jen.Op("&").Id(args), jen.Op("&").Id(reply))
	body := []jen.Code{
		jen.Id(args).Op(":=").Id(mn.args).Values(argVals...),
		jen.Var().Id(reply).Id(mn.reply),
	}
	if len(m.Results) == 0 {
		body = append(body, jen.Return(invoke))
	} else {
		zero := sc.name("zero")
		var zeros, vals []jen.Code
		for i := range m.Results {
			zeros = append(zeros, jen.Id(zero).Dot(mn.results[i]))
			vals = append(vals, jen.Id(reply).Dot(mn.results[i]))
		}
		body = append(body,
			jen.If(jen.Id(err).Op(":=").Add(invoke), jen.Id(err).Op("!=").Nil()).Block(
				jen.Var().Id(zero).Id(mn.reply),
				jen.Return(append(zeros, jen.Id(err))...),
			),
			jen.Return(append(vals, jen.Nil())...),
		)
	}
	if len(m.Doc) > 0 {
		for _, line := range m.Doc {
			g.f.Comment(line)
		}
	} else {
		g.f.Commentf("%s calls %s.%s on the cluster.", m.Name, g.svc.Name, m.Name)
	}
	g.f.Func().Params(jen.Id(recv).Op("*").Id(g.n.client)).Id(m.Name).Params(params...).Params(results...).Block(body...)
	g.f.Line()
}
