package templates

import "github.com/dave/jennifer/jen"

// server emits the registration function of the server adapter; the
// per-method handlers live in the descriptor.
func (g *gen) server() {
	sc := newScope(g.n.file)
	s, impl := sc.name("s"), sc.name("impl")
	g.f.Commentf("%s registers impl with s to serve %s.", g.n.register, g.svc.Name)
	g.f.Func().Id(g.n.register).Params(
		jen.Id(s).Op("*").Add(rt("Server")),
		jen.Id(impl).Add(g.qual(g.svc.Type.Obj())),
	).Error().Block(
		jen.Return(jen.Id(s).Dot("Register").Call(jen.Id(g.n.desc), jen.Id(impl))),
	)
	g.f.Line()
}
