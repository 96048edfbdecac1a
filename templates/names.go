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

	prefix string   // of the service's unexported file-level names
	longer []string // the prefixes of other services of the package that extend it

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
		file:      root,
		imports:   map[string]string{},
		declared:  map[string]string{},
		desc:      exported[0],
		client:    exported[1],
		newClient: exported[2],
		register:  exported[3],
		methods:   map[*model.Method]*methodNames{},
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
	n.prefix = lowerFirst(svc.Name)
	for _, o := range f.OtherServices {
		if p := lowerFirst(o); len(p) > len(n.prefix) && strings.HasPrefix(p, n.prefix) {
			n.longer = append(n.longer, p)
		}
	}
	// The client's field shares a selector space with the service's
	// methods, unexported ones included.
	selectors := newScope(nil)
	for _, m := range svc.Methods {
		selectors.reserve(m.Name)
	}
	n.clientField = selectors.name("client")
	for _, m := range svc.Methods {
		mn := &methodNames{
			desc:  n.own(m.Name + "Desc"),
			args:  n.own(m.Name + "Args"),
			reply: n.own(m.Name + "Reply"),
		}
		mn.fields = messageFields(m.Params, "A")
		mn.results = messageFields(m.Results, "R")
		n.methods[m] = mn
	}
	for _, t := range svc.Codec {
		stem := typeStem(t)
		n.helpers.Set(t, &helperNames{
			append: n.own("Append" + stem),
			read:   n.own("Read" + stem),
		})
	}
	n.allocErrors(svc)
	return n
}

// own allocates a file-level name of this service: its prefix and rest.
// Another service of the package, generated into its own file by another
// run, allocates the same way; a name that starts with that service's
// longer prefix (service A's "aBGetDesc" against service AB's) could be
// one of its names, so an underscore after this service's prefix keeps the
// two apart.
func (n *names) own(rest string) string {
	base := n.prefix + rest
	for slices.ContainsFunc(n.longer, func(p string) bool { return strings.HasPrefix(base, p) }) {
		rest = "_" + rest
		base = n.prefix + rest
	}
	return n.file.name(base)
}

// messageFields names the fields of an argument or reply struct. They
// share a selector space with its AppendFF and UnmarshalFF methods.
func messageFields(vars []*model.Var, prefix string) []string {
	sc := newScope(nil)
	sc.reserve("AppendFF")
	sc.reserve("UnmarshalFF")
	out := make([]string, len(vars))
	for i, v := range vars {
		out[i] = sc.name(fieldName(v.Name, prefix, i))
	}
	return out
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
