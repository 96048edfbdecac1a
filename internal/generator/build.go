package generator

import (
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"

	"golang.org/x/tools/go/packages"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// builder turns loaded packages into validated model files, collecting
// every mistake in diags.
type builder struct {
	cfg   *Config
	fset  *token.FileSet
	diags *diagnostics

	src      *sources
	consumed map[token.Pos]bool        // directives that belong to a service
	selected map[string]bool           // -type, nil for all
	found    map[string]bool           // -type names met
	outputs  map[string]*model.Service // by output path
	services []string                  // every //ff:service met, selected or not
	expected map[string]bool           // the default output path of each of them

	ifaceTimeout *directive // the //ff:timeout of the service being built
	// Of the service being built: whether a method has //ff:scatter, and
	// the methods with //ff:linearizable, which need one.
	scatterSeen  bool
	linearizable []linearizableUse
}

// linearizableUse is a method's //ff:linearizable, checked once the whole
// service is known.
type linearizableUse struct {
	where string // Service.Method
	dir   *directive
}

func newBuilder(cfg *Config, fset *token.FileSet, diags *diagnostics) *builder {
	b := &builder{
		cfg:      cfg,
		fset:     fset,
		diags:    diags,
		consumed: map[token.Pos]bool{},
		found:    map[string]bool{},
		outputs:  map[string]*model.Service{},
		expected: map[string]bool{},
	}
	if len(cfg.Types) > 0 {
		b.selected = map[string]bool{}
		for _, t := range cfg.Types {
			b.selected[t] = true
		}
	}
	return b
}

// build returns one model file per selected service.
func (b *builder) build(pkgs []*packages.Package) []*model.File {
	b.src = newSources(b.fset, pkgs)
	var files []*model.File
	for _, p := range pkgs {
		files = append(files, b.buildPackage(p)...)
	}
	// With -type, other services are not looked at, so their directives
	// cannot be told from misplaced ones.
	if b.selected == nil {
		for _, p := range pkgs {
			b.reportStray(p)
		}
	}
	for _, name := range b.cfg.Types {
		if !b.found[name] {
			b.diags.add(token.Position{}, "-type "+name+": no //ff:service interface of that name in "+strings.Join(b.cfg.Patterns, " "))
		}
	}
	if len(b.cfg.Types) == 0 && len(files) == 0 && b.diags.empty() {
		b.diags.add(token.Position{}, "no //ff:service interface in "+strings.Join(b.cfg.Patterns, " "))
	}
	return files
}

func (b *builder) buildPackage(p *packages.Package) []*model.File {
	if p.Types == nil || p.TypesInfo == nil {
		return nil
	}
	var files []*model.File
	first := len(b.services)
	for _, f := range p.Syntax {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && !gd.Lparen.IsValid() {
					doc = gd.Doc
				}
				if file := b.typeSpec(p, f, ts, doc); file != nil {
					files = append(files, file)
				}
			}
		}
	}
	for _, file := range files {
		for _, name := range b.services[first:] {
			if name != file.Service.Name {
				file.OtherServices = append(file.OtherServices, name)
			}
		}
	}
	return files
}

// typeSpec builds the service declared by ts, if ts carries //ff:service.
func (b *builder) typeSpec(p *packages.Package, f *ast.File, ts *ast.TypeSpec, doc *ast.CommentGroup) *model.File {
	dirs, _ := directivesOf(doc)
	var svcDir *directive
	for _, d := range dirs {
		if d.Name == "service" {
			svcDir = d
		}
	}
	if svcDir == nil {
		return nil
	}
	name := ts.Name.Name
	b.services = append(b.services, name)
	source := b.fset.File(ts.Pos()).Name()
	cons := fileConstraint(f, source)
	out := outputPath(source, name, cons != nil)
	b.expected[out] = true
	if b.selected != nil && !b.selected[name] {
		return nil
	}
	b.found[name] = true
	for _, d := range dirs {
		b.consumed[d.Pos] = true
	}
	// A rejected service must not also report its methods' directives.
	if it, ok := ts.Type.(*ast.InterfaceType); ok {
		for _, m := range it.Methods.List {
			if m.Doc != nil {
				for _, c := range m.Doc.List {
					b.consumed[c.Slash] = true
				}
			}
		}
	}
	obj, _ := p.TypesInfo.Defs[ts.Name].(*types.TypeName)
	if obj == nil {
		return nil
	}
	named, _ := types.Unalias(obj.Type()).(*types.Named)
	iface, _ := obj.Type().Underlying().(*types.Interface)
	switch {
	case ts.Assign.IsValid():
		b.diags.errorf(svcDir.Pos, "//ff:service is on the alias %s; put it on the interface type itself", name)
		return nil
	case iface == nil || named == nil:
		b.diags.errorf(svcDir.Pos, "//ff:service is on %s, which is not an interface type; only interfaces can be services", name)
		return nil
	case ts.TypeParams != nil:
		b.diags.errorf(svcDir.Pos, "service %s is generic; a service interface cannot have type parameters", name)
		return nil
	}
	svc := &model.Service{
		Name: name,
		Wire: p.Types.Name() + "." + name,
		Type: named,
	}
	base := b.serviceDefaults(svc, dirs)
	b.methods(p, svc, iface, base)

	if b.cfg.Output != "" {
		out = b.cfg.Output
		if !filepath.IsAbs(out) {
			out = filepath.Join(b.cfg.dir(), out)
		}
		if filepath.Dir(out) != filepath.Dir(source) {
			b.diags.errorf(svcDir.Pos, "-output %s is not in the directory of package %s (%s)", b.cfg.Output, p.Types.Name(), filepath.Dir(source))
		}
	}
	if other := b.outputs[out]; other != nil {
		b.diags.errorf(svcDir.Pos, "services %s and %s would both generate %s; use -output to separate them", other.Name, name, relative(out, b.cfg.dir()))
	}
	b.outputs[out] = svc

	taken := map[string]bool{}
	for _, n := range p.Types.Scope().Names() {
		taken[n] = true
	}
	b.checkExported(p, svc, taken)
	file := &model.File{
		Path:    out,
		Source:  filepath.Base(source),
		Command: b.cfg.command(),
		Pkg:     p.Types,
		Taken:   taken,
		Service: svc,
	}
	if cons != nil {
		file.Constraint = cons.String()
	}
	b.evolve(file)
	return file
}

// checkExported reports user declarations that take a name the generated
// file exports.
func (b *builder) checkExported(p *packages.Package, svc *model.Service, taken map[string]bool) {
	for _, n := range ExportedNames(svc.Name) {
		if !taken[n] {
			continue
		}
		obj := p.Types.Scope().Lookup(n)
		b.diags.errorf(obj.Pos(), "%s is already declared in package %s; ffgen generates it for service %s (rename one of them)", n, p.Types.Name(), svc.Name)
	}
}

// ExportedNames lists the names a generated file exports for service name.
func ExportedNames(name string) []string {
	return []string{name + "Desc", name + "Client", "New" + name + "Client", "Register" + name + "Server"}
}

// reportStray reports every directive that belongs to no service.
func (b *builder) reportStray(p *packages.Package) {
	for _, f := range p.Syntax {
		owner := map[token.Pos]string{}
		for _, md := range b.src.methods {
			if md.file == f && md.field.Doc != nil {
				for _, c := range md.field.Doc.List {
					owner[c.Slash] = md.iface
				}
			}
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				d, ok := parseDirective(c)
				if !ok || b.consumed[d.Pos] {
					continue
				}
				switch iface, inIface := owner[d.Pos]; {
				case d.Name == "service":
					b.diags.errorf(d.Pos, "//ff:service must be in the doc comment of an interface type declaration")
				case inIface:
					b.diags.errorf(d.Pos, "%s is on a method of %s, which is not an //ff:service interface nor embedded in one", d, iface)
				default:
					b.diags.errorf(d.Pos, "%s must be in the doc comment of an //ff:service interface or of one of its methods", d)
				}
			}
		}
	}
}

// snakeCase turns an interface name into a file name stem, reading runs
// of capitals as Go names write initialisms: Accounts → accounts,
// HTTPServer → http_server, UserAPI → user_api, HTTPAPIv2Service →
// http_api_v2_service, UserIDs → user_ids.
func snakeCase(s string) string {
	var words []string
	for _, w := range nameWords([]rune(s)) {
		words = append(words, strings.ToLower(w))
	}
	return strings.Join(words, "_")
}

func nameWords(r []rune) []string {
	var words []string
	isUpper := func(i int) bool { return i < len(r) && unicode.IsUpper(r[i]) }
	for i := 0; i < len(r); {
		j := i
		for isUpper(j) {
			j++
		}
		k := j // the lowercase letters and digits after the capitals
		for k < len(r) && !unicode.IsUpper(r[k]) {
			k++
		}
		switch {
		case j-i <= 1 || j == len(r):
			// One capital starts a word; a run of them at the end is its
			// initialisms, or one word.
			if j == len(r) {
				words = append(words, split(r[i:j])...)
				i = j
				continue
			}
			words = append(words, string(r[i:k]))
			i = k
		case unicode.IsDigit(r[j]):
			// HTTP2Server: the digits belong to the run.
			for j < len(r) && unicode.IsDigit(r[j]) {
				j++
			}
			words = append(words, string(r[i:j]))
			i = j
		case initialisms(r[i:j-1]) != nil || initialisms(r[i:j]) == nil:
			// HTTPServer: the last capital starts the next word.
			words = append(words, split(r[i:j-1])...)
			i = j - 1
		default:
			// HTTPAPIv2: the run is initialisms; what follows is a word of
			// its own, unless it is a plural s (IDs).
			words = append(words, initialisms(r[i:j])...)
			if string(r[j:k]) == "s" {
				words[len(words)-1] += "s"
			} else {
				words = append(words, string(r[j:k]))
			}
			i = k
		}
	}
	return words
}

// split returns the initialisms r is made of, or r as one word.
func split(r []rune) []string {
	if w := initialisms(r); w != nil {
		return w
	}
	return []string{string(r)}
}

// initialisms splits r into common initialisms, or returns nil if it is
// not made of them.
func initialisms(r []rune) []string {
	if len(r) == 0 {
		return nil
	}
	from := make([]int, len(r)+1) // from[i] > 0: r[:i] ends with an initialism starting at from[i]-1
	for i := 1; i <= len(r); i++ {
		for j := max(0, i-5); j < i && from[i] == 0; j++ {
			if (j == 0 || from[j] > 0) && commonInitialisms[string(r[j:i])] {
				from[i] = j + 1
			}
		}
	}
	if from[len(r)] == 0 {
		return nil
	}
	var out []string
	for i := len(r); i > 0; i = from[i] - 1 {
		out = append([]string{string(r[from[i]-1 : i])}, out...)
	}
	return out
}

// commonInitialisms are those Go style writes in capitals (the list of
// golint and staticcheck).
var commonInitialisms = setOf("ACL API ASCII CPU CSS DNS EOF GUID HTML HTTP HTTPS ID IP JSON LHS QPS RAM RHS RPC SLA SMTP SQL SSH TCP TLS TTL UDP UI UID UUID URI URL UTF8 VM XML XMPP XSRF XSS")

// sortedByPos returns the explicit methods of iface in source order.
func sortedByPos(iface *types.Interface) []*types.Func {
	var fns []*types.Func
	for i := range iface.NumExplicitMethods() {
		fns = append(fns, iface.ExplicitMethod(i))
	}
	sort.SliceStable(fns, func(i, j int) bool { return fns[i].Pos() < fns[j].Pos() })
	return fns
}

// methodsInOrder lists the methods of a service, each with every
// declaration of it: its own in source order, then those of each embedded
// interface in the order embedded. Go lets two embedded interfaces declare
// the same method; both declarations carry directives.
func methodsInOrder(iface *types.Interface) [][]*types.Func {
	var out [][]*types.Func
	index := map[string]int{}
	seen := map[*types.Func]bool{}
	add := func(fn *types.Func) {
		if seen[fn] {
			return
		}
		seen[fn] = true
		if i, ok := index[fn.Name()]; ok {
			out[i] = append(out[i], fn)
			return
		}
		index[fn.Name()] = len(out)
		out = append(out, []*types.Func{fn})
	}
	var walk func(it *types.Interface)
	walk = func(it *types.Interface) {
		for _, fn := range sortedByPos(it) {
			add(fn)
		}
		for i := range it.NumEmbeddeds() {
			if e, ok := it.EmbeddedType(i).Underlying().(*types.Interface); ok {
				walk(e)
			}
		}
	}
	walk(iface)
	// Every method of the type set must be there, whatever the walk missed.
	for i := range iface.NumMethods() {
		if fn := iface.Method(i); !slices.ContainsFunc(out, func(d []*types.Func) bool { return d[0].Name() == fn.Name() }) {
			add(fn)
		}
	}
	return slices.Clip(out)
}
