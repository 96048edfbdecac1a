package generator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/tools/go/packages"
)

// sources finds the syntax that declares an interface method, wherever its
// package came from. Directives live in comments, which type information
// does not carry: the loaded packages have their syntax, but an interface
// embedded from a package that is only a dependency is known by its types
// alone, so its file is parsed here. Either way a method is found by its
// file, line and name, so the result never depends on which packages the
// patterns named.
type sources struct {
	fset    *token.FileSet
	methods map[posKey]*methodDecl
	parsed  map[string]bool              // files indexed, by name
	goFiles map[string][]string          // package path → its files
	pkgs    map[string]*types.Package    // every package reachable, by path
	files   map[*token.File]*ast.File    // syntax by token file
	scopes  map[*ast.File]*types.Package // evaluation packages, by file
}

// posKey is where a method is declared, as export data keeps it: file and
// line (not the column, which export data drops) and the method's name.
type posKey struct {
	file string
	line int
	name string
}

// methodDecl is one method in the source of an interface type.
type methodDecl struct {
	iface string     // the interface that declares it
	field *ast.Field // its declaration; Doc holds its directives
	file  *ast.File  // the file, for resolving names in directives
	pkg   *types.Package
}

func newSources(fset *token.FileSet, pkgs []*packages.Package) *sources {
	s := &sources{
		fset:    fset,
		methods: map[posKey]*methodDecl{},
		parsed:  map[string]bool{},
		goFiles: map[string][]string{},
		pkgs:    map[string]*types.Package{},
		files:   map[*token.File]*ast.File{},
		scopes:  map[*ast.File]*types.Package{},
	}
	var addTypes func(p *types.Package)
	addTypes = func(p *types.Package) {
		if p == nil || s.pkgs[p.Path()] != nil {
			return
		}
		s.pkgs[p.Path()] = p
		for _, imp := range p.Imports() {
			addTypes(imp)
		}
	}
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		s.goFiles[p.PkgPath] = p.GoFiles
		addTypes(p.Types)
	})
	for _, p := range pkgs {
		for _, f := range p.Syntax {
			s.index(f, p.Types)
		}
	}
	return s
}

func (s *sources) key(pos token.Pos, name string) posKey {
	p := s.fset.Position(pos)
	return posKey{file: p.Filename, line: p.Line, name: name}
}

// index records every interface method declared in f.
func (s *sources) index(f *ast.File, pkg *types.Package) {
	tf := s.fset.File(f.Pos())
	if tf == nil {
		return
	}
	s.parsed[tf.Name()] = true
	s.files[tf] = f
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok {
			return true
		}
		if it, ok := ts.Type.(*ast.InterfaceType); ok {
			for _, m := range it.Methods.List {
				if len(m.Names) == 1 {
					s.methods[s.key(m.Names[0].Pos(), m.Names[0].Name)] = &methodDecl{iface: ts.Name.Name, field: m, file: f, pkg: pkg}
				}
			}
		}
		return true
	})
}

// method returns the declaration of fn, parsing its file if no loaded
// package holds it, or nil if the source cannot be found.
func (s *sources) method(fn *types.Func) *methodDecl {
	k := s.key(fn.Pos(), fn.Name())
	if md := s.methods[k]; md != nil {
		return md
	}
	if fn.Pkg() == nil || k.file == "" {
		return nil
	}
	name := s.locate(k.file, fn.Pkg().Path())
	if name == "" || s.parsed[name] {
		return s.methods[posKey{file: name, line: k.line, name: k.name}]
	}
	s.parsed[name] = true
	f, err := parser.ParseFile(s.fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	s.index(f, fn.Pkg())
	return s.methods[posKey{file: name, line: k.line, name: k.name}]
}

// locate finds the file export data names: as recorded, or, when the
// build trimmed its paths, by its base name among the package's files.
func (s *sources) locate(file, pkgPath string) string {
	if _, err := os.Stat(file); err == nil {
		return file
	}
	for _, f := range s.goFiles[pkgPath] {
		if filepath.Base(f) == filepath.Base(file) {
			return f
		}
	}
	return ""
}

// evalPackage returns a package in whose scope expressions written in f
// mean what they mean in f: the objects of pkg and the imports of f. Names
// in directives are type-checked in it.
func (s *sources) evalPackage(f *ast.File, pkg *types.Package) *types.Package {
	if e := s.scopes[f]; e != nil {
		return e
	}
	e := types.NewPackage(pkg.Path(), pkg.Name())
	for _, n := range pkg.Scope().Names() {
		e.Scope().Insert(pkg.Scope().Lookup(n))
	}
	for _, spec := range f.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		imp := s.pkgs[path]
		if err != nil || imp == nil {
			continue
		}
		name := imp.Name()
		if spec.Name != nil {
			name = spec.Name.Name
		}
		switch name {
		case "_":
		case ".":
			for _, n := range imp.Scope().Names() {
				if o := imp.Scope().Lookup(n); o.Exported() {
					e.Scope().Insert(o)
				}
			}
		default:
			e.Scope().Insert(types.NewPkgName(spec.Pos(), e, name, imp))
		}
	}
	s.scopes[f] = e
	return e
}

// pos returns where fn is declared, read from its syntax when it is known:
// export data keeps no columns.
func (s *sources) pos(fn *types.Func) token.Pos {
	if md := s.method(fn); md != nil {
		return md.field.Names[0].Pos()
	}
	return fn.Pos()
}

// varPos returns where parameter (or result) i of fn is declared, read
// from its syntax when it is known.
func (s *sources) varPos(fn *types.Func, i int, result bool) token.Pos {
	sig := fn.Signature()
	fallback := func() token.Pos {
		if result {
			return sig.Results().At(i).Pos()
		}
		return sig.Params().At(i).Pos()
	}
	md := s.method(fn)
	if md == nil {
		return fallback()
	}
	ft, ok := md.field.Type.(*ast.FuncType)
	if !ok {
		return fallback()
	}
	list := ft.Params
	if result {
		list = ft.Results
	}
	if list == nil {
		return fallback()
	}
	n := 0
	for _, f := range list.List {
		if len(f.Names) == 0 {
			if n == i {
				return f.Type.Pos()
			}
			n++
			continue
		}
		for _, name := range f.Names {
			if n == i {
				return name.Pos()
			}
			n++
		}
	}
	return fallback()
}
