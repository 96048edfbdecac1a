package generator

import (
	"go/types"
	"strings"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// entity resolves one //ff:entity path: a parameter, then fields, through
// pointers, ending at a string or integer kind.
func (b *builder) entity(where string, fn *types.Func, m *model.Method, a arg) *model.Entity {
	parts := strings.Split(a.Text, ".")
	e := &model.Entity{Text: a.Text, Param: -1}
	for i, p := range m.Params {
		if p.Name == parts[0] && p.Name != "_" {
			e.Param = i
		}
	}
	if e.Param < 0 {
		var names []string
		for _, p := range m.Params {
			if p.Name != "" && p.Name != "_" {
				names = append(names, p.Name)
			}
		}
		allowed := "it has no named parameter besides the context"
		if len(names) > 0 {
			allowed = "its parameters are " + strings.Join(names, ", ")
		}
		b.diags.errorf(a.Pos, "//ff:entity %s on %s: %s is not a parameter; %s", a.Text, where, parts[0], allowed)
		return nil
	}
	t := m.Params[e.Param].Type
	if m.Variadic && e.Param == len(m.Params)-1 {
		b.diags.errorf(a.Pos, "//ff:entity %s on %s: the variadic parameter %s cannot hold the entity", a.Text, where, parts[0])
		return nil
	}
	for i, field := range parts[1:] {
		t = b.derefSteps(t, e)
		s, ok := t.Underlying().(*types.Struct)
		if !ok {
			b.diags.errorf(a.Pos, "//ff:entity %s on %s: %s has type %s, which has no fields", a.Text, where, strings.Join(parts[:i+1], "."), typeString(t, fn.Pkg()))
			return nil
		}
		obj, index, _ := types.LookupFieldOrMethod(t, true, fn.Pkg(), field)
		v, isVar := obj.(*types.Var)
		if !isVar || !v.IsField() {
			b.diags.errorf(a.Pos, "//ff:entity %s on %s: %s has no field %s", a.Text, where, typeString(t, fn.Pkg()), field)
			return nil
		}
		// Walk promoted fields one embedded struct at a time.
		for _, idx := range index[:len(index)-1] {
			f := s.Field(idx)
			e.Steps = append(e.Steps, model.Step{Field: f.Name()})
			t = b.derefSteps(f.Type(), e)
			s = t.Underlying().(*types.Struct)
		}
		e.Steps = append(e.Steps, model.Step{Field: field})
		t = v.Type()
	}
	t = b.derefSteps(t, e)
	basic, _ := t.Underlying().(*types.Basic)
	switch {
	case basic != nil && basic.Info()&types.IsString != 0:
		e.Kind = model.EntityString
	case basic != nil && basic.Info()&types.IsInteger != 0 && basic.Info()&types.IsUnsigned != 0:
		e.Kind = model.EntityUint
	case basic != nil && basic.Info()&types.IsInteger != 0:
		e.Kind = model.EntityInt
	default:
		b.diags.errorf(a.Pos, "//ff:entity %s on %s has type %s; an entity must be of a string or integer kind", a.Text, where, typeString(t, fn.Pkg()))
		return nil
	}
	return e
}

// derefSteps adds a nil-checked dereference for every pointer around t.
func (b *builder) derefSteps(t types.Type, e *model.Entity) types.Type {
	for {
		p, ok := t.Underlying().(*types.Pointer)
		if !ok {
			return t
		}
		e.Steps = append(e.Steps, model.Step{Deref: true})
		t = p.Elem()
	}
}

// typeString writes t as the user wrote it in pkg.
func typeString(t types.Type, pkg *types.Package) string {
	return types.TypeString(t, types.RelativeTo(pkg))
}
