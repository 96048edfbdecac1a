package generator

import (
	"fmt"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/types/typeutil"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// codecSet collects, in first-reached order, the types of one service that
// need their own encode and decode functions.
type codecSet struct {
	pkg  *types.Package // the package of the generated file
	seen typeutil.Map
	list []types.Type
}

// add walks t and everything it reaches. It returns a description of the
// first part the codec cannot carry, or "".
func (c *codecSet) add(t types.Type) string {
	return c.walk(t, "")
}

func (c *codecSet) walk(t types.Type, path string) string {
	if c.seen.At(t) != nil {
		return ""
	}
	if problem := c.nameable(t); problem != "" {
		return problem
	}
	enc := model.Classify(t)
	if enc == model.Unsupported {
		const carries = "it carries basic kinds, structs, pointers, slices, arrays, maps, error and encoding.BinaryMarshaler types"
		if path == "" {
			return fmt.Sprintf("the codec cannot encode %s (%s)", typeString(t, c.pkg), carries)
		}
		return fmt.Sprintf("%s has type %s, which the codec cannot encode (%s)", path, typeString(t, c.pkg), carries)
	}
	if !enc.NeedsHelper() {
		return ""
	}
	// Mark before descending so recursive types terminate.
	c.seen.Set(t, true)
	c.list = append(c.list, t)
	switch u := types.Unalias(t).Underlying().(type) {
	case *types.Struct:
		if enc == model.Marshaler {
			return ""
		}
		for f := range model.EncodedFields(u) {
			if !f.Exported() && f.Pkg() != c.pkg {
				return fmt.Sprintf("%s has the unexported field %s of package %s, which generated code cannot reach", typeString(t, c.pkg), f.Name(), f.Pkg().Path())
			}
			if p := c.walk(f.Type(), typeString(t, c.pkg)+"."+f.Name()); p != "" {
				return p
			}
		}
	case *types.Pointer:
		if enc != model.Marshaler {
			return c.walk(u.Elem(), c.at(t, path)+".*")
		}
	case *types.Slice:
		if enc != model.Marshaler {
			return c.walk(u.Elem(), c.at(t, path)+"[i]")
		}
	case *types.Array:
		if enc != model.Marshaler {
			return c.walk(u.Elem(), c.at(t, path)+"[i]")
		}
	case *types.Map:
		if enc != model.Marshaler {
			if p := c.walk(u.Key(), "a key of "+c.at(t, path)); p != "" {
				return p
			}
			return c.walk(u.Elem(), c.at(t, path)+"[k]")
		}
	}
	return ""
}

// at names the value being walked: its path, or its type at the top.
func (c *codecSet) at(t types.Type, path string) string {
	if path == "" {
		return typeString(t, c.pkg)
	}
	return path
}

// nameable reports a named type that generated code could not write.
func (c *codecSet) nameable(t types.Type) string {
	switch n := t.(type) {
	case *types.Alias:
		return c.nameable(types.Unalias(n))
	case *types.Named:
		obj := n.Obj()
		if obj.Pkg() != nil && obj.Pkg() != c.pkg && !obj.Exported() {
			return fmt.Sprintf("%s is unexported in package %s", obj.Name(), obj.Pkg().Path())
		}
		if obj.Parent() != nil && obj.Pkg() != nil && obj.Parent() != obj.Pkg().Scope() {
			return fmt.Sprintf("%s is declared inside a function", obj.Name())
		}
		for i := range n.TypeArgs().Len() {
			if p := c.nameable(n.TypeArgs().At(i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// codecCheck walks the parameters, results and error types of m.
func (b *builder) codecCheck(set *codecSet, where string, fn *types.Func, m *model.Method) {
	check := func(pos token.Pos, what string, t types.Type) {
		if p := set.add(t); p != "" {
			b.diags.errorf(pos, "%s of %s: %s", what, where, p)
		}
	}
	for i, p := range m.Params {
		if isContext(p.Type) {
			continue // reported by the signature check
		}
		check(b.src.varPos(fn, i+1, false), "parameter "+displayName(p.Name, i+1), p.Type)
	}
	for i, r := range m.Results {
		check(b.src.varPos(fn, i, true), "result "+displayName(r.Name, i), r.Type)
	}
	for _, r := range m.Errors {
		if r.Type != nil {
			d := "//ff:fail"
			if r.Failover {
				d = "//ff:failover"
			}
			check(r.Pos, "error type "+r.Code+" in "+d, r.Type)
		}
	}
}

func displayName(name string, i int) string {
	if name == "" || name == "_" {
		return fmt.Sprintf("#%d", i)
	}
	return name
}
