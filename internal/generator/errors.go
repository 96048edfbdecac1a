package generator

import (
	"go/token"
	"go/types"
	"strings"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// errorRules resolves the names of //ff:fail and //ff:failover in the scope
// of the file that declares the method.
func (b *builder) errorRules(where string, fn *types.Func, m *model.Method, dirs []*directive) {
	scope := b.fileScopes[b.fset.Position(fn.Pos()).Filename]
	seen := map[string]token.Pos{}
	for _, d := range dirs {
		if d.Name != "fail" && d.Name != "failover" {
			continue
		}
		for _, a := range d.Args {
			if _, dup := seen[a.Text]; dup {
				b.diags.errorf(a.Pos, "%s on %s names %s twice", d, where, a.Text)
				continue
			}
			seen[a.Text] = a.Pos
			if scope == nil {
				b.diags.errorf(a.Pos, "%s on %s: cannot resolve %s outside a loaded package", d, where, a.Text)
				continue
			}
			if r := b.errorRule(where, d, a, scope); r != nil {
				r.Failover = d.Name == "failover"
				m.Errors = append(m.Errors, r)
			}
		}
	}
}

func (b *builder) errorRule(where string, d *directive, a arg, scope *types.Scope) *model.ErrorRule {
	name, pointer := strings.CutPrefix(a.Text, "*")
	obj := lookupQualified(scope, name)
	bad := func(format string, args ...any) *model.ErrorRule {
		b.diags.errorf(a.Pos, "%s on %s: "+format+"; name a package-level error value (matched with errors.Is) or an error type such as *NotFoundError (matched with errors.As)", append([]any{d, where}, args...)...)
		return nil
	}
	switch o := obj.(type) {
	case nil:
		return bad("%s is not declared", name)
	case *types.Var, *types.Const:
		if pointer {
			return bad("%s is a value, not a type", name)
		}
		if o.Parent() != o.Pkg().Scope() {
			return bad("%s is not package-level", name)
		}
		if v, _ := model.ImplementsError(o.Type()); !v {
			return bad("%s has type %s, which is not an error", name, typeString(o.Type(), o.Pkg()))
		}
		return &model.ErrorRule{Code: a.Text, Value: o}
	case *types.TypeName:
		if o.Pkg() == nil {
			return bad("%s is predeclared", name)
		}
		named, ok := types.Unalias(o.Type()).(*types.Named)
		if !ok {
			return bad("%s is not a named type", name)
		}
		if named.TypeParams().Len() > 0 {
			return bad("%s is generic", name)
		}
		if types.IsInterface(named) {
			return bad("%s is an interface; the client could not build one", name)
		}
		value, ptr := model.ImplementsError(named)
		switch {
		case pointer && !ptr:
			return bad("*%s does not implement error", name)
		case !pointer && !value && ptr:
			return bad("%s does not implement error, *%s does: write *%s", name, name, name)
		case !pointer && !value:
			return bad("%s does not implement error", name)
		}
		return &model.ErrorRule{Code: a.Text, Type: named, Pointer: pointer}
	default:
		return bad("%s is not an error value or type", name)
	}
}

// lookupQualified finds name or pkg.name from a file scope.
func lookupQualified(scope *types.Scope, name string) types.Object {
	pkgName, sel, qualified := strings.Cut(name, ".")
	if !qualified {
		_, obj := scope.LookupParent(name, token.NoPos)
		return obj
	}
	pn, ok := scope.Lookup(pkgName).(*types.PkgName)
	if !ok || !token.IsExported(sel) {
		return nil
	}
	return pn.Imported().Scope().Lookup(sel)
}
