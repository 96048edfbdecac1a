package templates

import (
	"fmt"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/tools/go/types/typeutil"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// scope allocates identifiers that never equal a name visible from an
// enclosing scope: the package's own declarations, the predeclared names,
// the imports of the generated file, the generated declarations and the
// parameters of the function being rendered. A generated local therefore
// never shadows anything the generated code refers to.
type scope struct {
	parent *scope
	used   map[string]bool
}

func newScope(parent *scope) *scope { return &scope{parent: parent, used: map[string]bool{}} }

func (s *scope) taken(name string) bool {
	for ; s != nil; s = s.parent {
		if s.used[name] {
			return true
		}
	}
	return token.IsKeyword(name)
}

// reserve marks name as used in s, whether or not it was free.
func (s *scope) reserve(name string) { s.used[name] = true }

// name returns base, or base with the smallest numeric suffix that is free,
// and reserves it.
func (s *scope) name(base string) string {
	n := base
	for i := 1; s.taken(n); i++ {
		n = fmt.Sprintf("%s%d", base, i)
	}
	s.used[n] = true
	return n
}

// names holds every file-level identifier of one generated file.
type names struct {
	file     *scope
	imports  map[string]string // package path → name in this file
	declared map[string]string // package path → its package clause name

	desc, client, newClient, register string
	clientField                       string // the *runtime.Client field of the client

	methods map[*model.Method]*methodNames
	helpers typeutil.Map // types.Type → *helperNames
	errs    errorNames
}

type methodNames struct {
	desc, args, reply string
	fields            []string // argument struct fields, one per parameter
	results           []string // reply struct fields, one per result
}

type helperNames struct{ append, read string }

// Import paths the generated code may use besides the user's types.
const (
	runtimePath = "github.com/ffgen/ffgen/runtime"
	codecPath   = "github.com/ffgen/ffgen/runtime/codec"
)

var fixedImports = []struct{ path, name string }{
	{"context", "context"},
	{"errors", "errors"},
	{"strconv", "strconv"},
	{"time", "time"},
	{runtimePath, "runtime"},
	{codecPath, "codec"},
}

func newNames(f *model.File) *names {
	root := newScope(nil)
	for _, n := range types.Universe.Names() {
		root.reserve(n)
	}
	for n := range f.Taken {
		root.reserve(n)
	}
	svc := f.Service
	exported := []string{svc.Name + "Desc", svc.Name + "Client", "New" + svc.Name + "Client", "Register" + svc.Name + "Server"}
	for _, n := range exported {
		root.reserve(n)
	}
	n := &names{
		file:        root,
		imports:     map[string]string{},
		declared:    map[string]string{},
		desc:        exported[0],
		client:      exported[1],
		newClient:   exported[2],
		register:    exported[3],
		clientField: "client",
		methods:     map[*model.Method]*methodNames{},
	}
	// Imports first: the user's own names keep theirs, imports move aside.
	for _, imp := range fixedImports {
		n.imports[imp.path] = root.name(imp.name)
		n.declared[imp.path] = imp.name
	}
	for _, p := range packagesOf(f) {
		if _, ok := n.imports[p.Path()]; !ok && p != f.Pkg {
			n.imports[p.Path()] = root.name(p.Name())
			n.declared[p.Path()] = p.Name()
		}
	}
	prefix := lowerFirst(svc.Name)
	for _, m := range svc.Methods {
		mn := &methodNames{
			desc:  root.name(prefix + m.Name + "Desc"),
			args:  root.name(prefix + m.Name + "Args"),
			reply: root.name(prefix + m.Name + "Reply"),
		}
		fields := newScope(nil)
		for i, p := range m.Params {
			mn.fields = append(mn.fields, fields.name(fieldName(p.Name, "A", i)))
		}
		fields = newScope(nil)
		for i, r := range m.Results {
			mn.results = append(mn.results, fields.name(fieldName(r.Name, "R", i)))
		}
		n.methods[m] = mn
	}
	for _, t := range svc.Codec {
		stem := typeStem(t)
		n.helpers.Set(t, &helperNames{
			append: root.name(prefix + "Append" + stem),
			read:   root.name(prefix + "Read" + stem),
		})
	}
	n.allocErrors(svc, prefix)
	return n
}

func (n *names) helper(t types.Type) *helperNames {
	h, _ := n.helpers.At(t).(*helperNames)
	return h
}

// fieldName exports a parameter name for a message field, which the JSON
// codec needs; unnamed parameters get a positional name.
func fieldName(name, prefix string, i int) string {
	if name == "" || name == "_" {
		return fmt.Sprintf("%s%d", prefix, i)
	}
	if up := strings.ToUpper(name); initialisms[up] {
		return up
	}
	r, size := utf8.DecodeRuneInString(name)
	if !unicode.IsLetter(r) || !unicode.IsUpper(unicode.ToUpper(r)) {
		return prefix + name
	}
	return string(unicode.ToUpper(r)) + name[size:]
}

// initialisms are written in capitals as exported names, as Go style asks.
var initialisms = map[string]bool{"ID": true, "IP": true, "URL": true, "URI": true, "API": true, "UUID": true, "HTTP": true, "JSON": true}

func lowerFirst(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[size:]
}

// typeStem names a type inside helper function names: Balance,
// SliceString, MapStringInt64, PtrNode, PageItem.
func typeStem(t types.Type) string {
	switch t := types.Unalias(t).(type) {
	case *types.Basic:
		return upperFirst(t.Name())
	case *types.Named:
		s := t.Obj().Name()
		for i := range t.TypeArgs().Len() {
			s += typeStem(t.TypeArgs().At(i))
		}
		return upperFirst(s)
	case *types.Pointer:
		return "Ptr" + typeStem(t.Elem())
	case *types.Slice:
		return "Slice" + typeStem(t.Elem())
	case *types.Array:
		return fmt.Sprintf("Array%d%s", t.Len(), typeStem(t.Elem()))
	case *types.Map:
		return "Map" + typeStem(t.Key()) + typeStem(t.Elem())
	case *types.Struct:
		return "Struct"
	case *types.Interface:
		return "Error"
	}
	return "Value"
}

func upperFirst(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[size:]
}

// packagesOf lists, sorted by path, every package whose names the
// generated file may write.
func packagesOf(f *model.File) []*types.Package {
	seen := map[*types.Package]bool{}
	var visit func(t types.Type)
	var visited typeutil.Map
	visit = func(t types.Type) {
		if visited.At(t) != nil {
			return
		}
		visited.Set(t, true)
		switch t := t.(type) {
		case *types.Alias:
			if p := t.Obj().Pkg(); p != nil {
				seen[p] = true
			}
			for i := range t.TypeArgs().Len() {
				visit(t.TypeArgs().At(i))
			}
			visit(types.Unalias(t))
		case *types.Named:
			if p := t.Obj().Pkg(); p != nil {
				seen[p] = true
			}
			for i := range t.TypeArgs().Len() {
				visit(t.TypeArgs().At(i))
			}
			visit(t.Underlying())
		case *types.Pointer:
			visit(t.Elem())
		case *types.Slice:
			visit(t.Elem())
		case *types.Array:
			visit(t.Elem())
		case *types.Map:
			visit(t.Key())
			visit(t.Elem())
		case *types.Struct:
			for i := range t.NumFields() {
				visit(t.Field(i).Type())
			}
		}
	}
	for _, m := range f.Service.Methods {
		for _, v := range slices.Concat(m.Params, m.Results) {
			visit(v.Type)
		}
		for _, r := range m.Errors {
			if r.Value != nil {
				seen[r.Value.Pkg()] = true
			} else {
				visit(r.Type)
			}
		}
	}
	for _, t := range f.Service.Codec {
		visit(t)
	}
	pkgs := make([]*types.Package, 0, len(seen))
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	return pkgs
}
