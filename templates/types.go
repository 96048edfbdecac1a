package templates

import (
	"go/types"
	"strconv"
	"time"

	"github.com/dave/jennifer/jen"
)

// typ renders t from go/types: named types through Qual with their type
// arguments, aliases by their own name where this file can write it.
func (g *gen) typ(t types.Type) jen.Code {
	switch t := t.(type) {
	case *types.Alias:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return jen.Id(obj.Name()) // any
		}
		if obj.Pkg() == g.file.Pkg || obj.Exported() {
			return g.qual(obj).Types(g.typeList(t.TypeArgs())...)
		}
		return g.typ(types.Unalias(t))
	case *types.Basic:
		return jen.Id(t.Name())
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() == nil {
			return jen.Id(obj.Name()) // error, comparable
		}
		return g.qual(obj).Types(g.typeList(t.TypeArgs())...)
	case *types.Pointer:
		return jen.Op("*").Add(g.typ(t.Elem()))
	case *types.Slice:
		return jen.Index().Add(g.typ(t.Elem()))
	case *types.Array:
		return jen.Index(jen.Op(strconv.FormatInt(t.Len(), 10))).Add(g.typ(t.Elem()))
	case *types.Map:
		return jen.Map(g.typ(t.Key())).Add(g.typ(t.Elem()))
	case *types.Struct:
		fields := make([]jen.Code, t.NumFields())
		for i := range t.NumFields() {
			f := t.Field(i)
			var c *jen.Statement
			if f.Embedded() {
				c = jen.Add(g.typ(f.Type()))
			} else {
				c = jen.Id(f.Name()).Add(g.typ(f.Type()))
			}
			if tag := t.Tag(i); tag != "" {
				c.Op(strconv.Quote(tag))
			}
			fields[i] = c
		}
		return jen.Struct(fields...)
	case *types.Interface:
		if t.Empty() {
			return jen.Any()
		}
	}
	// Unreachable for validated models: the generator rejects the rest.
	return jen.Id(types.TypeString(t, types.RelativeTo(g.file.Pkg)))
}

func (g *gen) typeList(l *types.TypeList) []jen.Code {
	if l == nil || l.Len() == 0 {
		return nil
	}
	out := make([]jen.Code, l.Len())
	for i := range l.Len() {
		out[i] = g.typ(l.At(i))
	}
	return out
}

// qual refers to a package-level object by the name this file gives its
// package.
func (g *gen) qual(obj types.Object) *jen.Statement {
	return jen.Qual(obj.Pkg().Path(), obj.Name())
}

// rt and cd refer to the runtime and codec packages.
func rt(name string) *jen.Statement { return jen.Qual(runtimePath, name) }
func cd(name string) *jen.Statement { return jen.Qual(codecPath, name) }

// duration renders d in the largest unit that divides it: 2 * time.Second.
func duration(d time.Duration) jen.Code {
	units := []struct {
		d    time.Duration
		name string
	}{
		{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"},
		{time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"},
	}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return jen.Qual("time", u.name)
			}
			return jen.Op(strconv.FormatInt(int64(d/u.d), 10)).Op("*").Qual("time", u.name)
		}
	}
	return jen.Qual("time", "Duration").Call(jen.Op(strconv.FormatInt(int64(d), 10)))
}
