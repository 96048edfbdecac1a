package generator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// errorRules resolves the names of //ff:fail and //ff:failover as Go
// expressions in the file that declares the method: ErrNotFound, io.EOF,
// *NotFoundError, *NotFound[string].
func (b *builder) errorRules(where string, md *methodDecl, m *model.Method, dirs []*directive) {
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
			if md == nil || md.pkg == nil {
				b.diags.errorf(a.Pos, "%s on %s: cannot resolve %s outside a loaded package", d, where, a.Text)
				continue
			}
			if r := b.errorRule(where, d, a, b.src.evalPackage(md.file, md.pkg)); r != nil {
				r.Failover = d.Name == "failover"
				m.Errors = append(m.Errors, r)
			}
		}
	}
}

func (b *builder) errorRule(where string, d *directive, a arg, scope *types.Package) *model.ErrorRule {
	bad := func(format string, args ...any) *model.ErrorRule {
		b.diags.errorf(a.Pos, "%s on %s: "+format+"; name a package-level error value (matched with errors.Is) or an error type such as *NotFoundError (matched with errors.As)", append([]any{d, where}, args...)...)
		return nil
	}
	expr, err := parser.ParseExpr(a.Text)
	if err != nil {
		return bad("%s is not a Go name or type", a.Text)
	}
	inner, pointer := expr, false
	if star, ok := expr.(*ast.StarExpr); ok {
		inner, pointer = star.X, true
	}
	name := strings.TrimPrefix(a.Text, "*")
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	if err := types.CheckExpr(b.fset, scope, token.NoPos, inner, info); err != nil {
		msg := err.Error()
		if te, ok := err.(types.Error); ok {
			msg = te.Msg
		}
		if undef, ok := strings.CutPrefix(msg, "undefined: "); ok {
			// Name what the user wrote: io.EOF, not io, when the file
			// does not import io.
			if sel, ok := inner.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == undef {
					return bad("%s is not declared (the file does not import %s)", name, undef)
				}
			}
			return bad("%s is not declared", undef)
		}
		if strings.Contains(msg, "not declared by package") || strings.Contains(msg, "not exported by package") {
			return bad("%s is not declared", name)
		}
		if strings.Contains(msg, "without instantiation") {
			return bad("%s is generic; name an instance, e.g. %s[string]", name, a.Text)
		}
		return bad("%s: %s", name, msg)
	}
	tv := info.Types[inner]
	if tv.IsValue() {
		var obj types.Object
		switch e := inner.(type) {
		case *ast.Ident:
			obj = info.Uses[e]
		case *ast.SelectorExpr:
			obj = info.Uses[e.Sel]
		}
		switch o := obj.(type) {
		case *types.Var, *types.Const:
			if pointer {
				return bad("%s is a value, not a type", name)
			}
			if o.Pkg() == nil || o.Parent() != o.Pkg().Scope() {
				return bad("%s is not package-level", name)
			}
			if v, _ := model.ImplementsError(o.Type()); !v {
				return bad("%s has type %s, which is not an error", name, typeString(o.Type(), o.Pkg()))
			}
			return &model.ErrorRule{Code: a.Text, Value: o, Pos: a.Pos}
		}
		return bad("%s is not an error value or type", name)
	}
	if !tv.IsType() {
		return bad("%s is not an error value or type", name)
	}
	named, ok := types.Unalias(tv.Type).(*types.Named)
	if _, basic := types.Unalias(tv.Type).(*types.Basic); basic {
		return bad("%s is predeclared", name)
	}
	if !ok {
		return bad("%s is not a named type", name)
	}
	if named.Obj().Pkg() == nil {
		return bad("%s is predeclared", name)
	}
	if named.TypeParams().Len() > named.TypeArgs().Len() {
		return bad("%s is generic; name an instance, e.g. %s[string]", name, a.Text)
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
	return &model.ErrorRule{Code: a.Text, Type: named, Pointer: pointer, Pos: a.Pos}
}
