package generator

import (
	"cmp"
	"fmt"
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"

	"github.com/ffgen/ffgen/internal/generator/model"
	"github.com/ffgen/ffgen/internal/timeouts"
)

// serviceDefaults applies the interface's own directives and returns the
// settings every method starts from.
func (b *builder) serviceDefaults(svc *model.Service, dirs []*directive) *model.Method {
	base := &model.Method{}
	b.ifaceTimeout = nil
	for _, d := range dirs {
		switch d.Name {
		case "service":
			if len(d.Args) > 0 {
				b.diags.errorf(d.Args[0].Pos, "//ff:service takes no arguments (on %s)", svc.Name)
			}
		case "default":
			b.applyDefault(svc.Name, d, base)
		case "timeout":
			b.applyTimeout(svc.Name, d, base)
			b.ifaceTimeout = d
		default:
			if _, ok := knownDirectives[d.Name]; ok {
				b.diags.errorf(d.Pos, "%s belongs on a method of %s, not on the interface; the interface takes //ff:service, //ff:default and //ff:timeout", d, svc.Name)
			} else {
				b.unknown(svc.Name, d)
			}
		}
	}
	return base
}

func (b *builder) unknown(where string, d *directive) {
	names := make([]string, 0, len(knownDirectives))
	for n := range knownDirectives {
		names = append(names, n)
	}
	slices.Sort(names)
	b.diags.errorf(d.Pos, "unknown directive %s on %s; known directives: %s", d, where, strings.Join(names, ", "))
}

func (b *builder) methods(p *packages.Package, svc *model.Service, iface *types.Interface, base *model.Method) {
	set := &codecSet{pkg: p.Types}
	b.scatterSeen, b.linearizable = false, nil
	for _, decls := range methodsInOrder(iface) {
		fn := decls[0]
		if m := b.method(svc, decls, base); m != nil {
			b.codecCheck(set, svc.Name+"."+fn.Name(), fn, m)
			svc.Methods = append(svc.Methods, m)
		}
	}
	if iface.NumMethods() == 0 {
		b.diags.errorf(svc.Type.Obj().Pos(), "service %s has no methods", svc.Name)
	}
	// Only a replicated service has a log of committed writes for a read
	// to wait on.
	if !b.scatterSeen {
		for _, l := range b.linearizable {
			b.diags.errorf(l.dir.Pos, "//ff:linearizable on %s needs a replicated service, and %s has no //ff:scatter method; without one there are no committed writes for a read to wait on", l.where, svc.Name)
		}
	}
	svc.Codec = set.list
}

// method validates one method and its directives. decls are its
// declarations: more than one when embedded interfaces repeat it.
func (b *builder) method(svc *model.Service, decls []*types.Func, base *model.Method) *model.Method {
	fn := decls[0]
	where := svc.Name + "." + fn.Name()
	md := b.src.method(fn)
	var dirs []*directive
	m := &model.Method{}
	*m = *base
	m.Name = fn.Name()
	m.Pos = fn.Pos()
	if md != nil {
		dirs, m.Doc = directivesOf(md.field.Doc)
	}
	for _, d := range dirs {
		b.consumed[d.Pos] = true
	}
	for _, other := range decls[1:] {
		b.sameDirectives(where, fn, md, dirs, other)
	}
	ok := b.signature(where, fn, m)

	var entity, timeout *directive
	var hold, scatter, hedge, linearizable *directive
	for _, d := range dirs {
		switch d.Name {
		case "entity":
			if entity != nil {
				b.diags.errorf(d.Pos, "%s has two //ff:entity lines; name every entity path on one line, the routing one first", where)
				continue
			}
			entity = d
			if len(d.Args) == 0 {
				b.diags.errorf(d.Pos, "//ff:entity on %s needs a path, e.g. //ff:entity id or //ff:entity req.AccountID", where)
			}
		case "fail", "failover":
			if len(d.Args) == 0 {
				b.diags.errorf(d.Pos, "%s on %s needs error names, e.g. %s ErrNotFound *LimitError", d, where, d)
			}
		case "hold":
			hold = d
			b.noArgs(where, d)
			m.Hold = true
		case "scatter":
			scatter = d
			b.noArgs(where, d)
			m.Mode = model.Scatter
			b.scatterSeen = true
		case "linearizable":
			linearizable = d
			b.noArgs(where, d)
			m.Linearizable = true
		case "hedge":
			hedge = d
			if len(d.Args) != 1 {
				b.diags.errorf(argPos(d, 1), "//ff:hedge on %s takes one duration, e.g. //ff:hedge 20ms", where)
				continue
			}
			if v, ok := b.duration(where, d, d.Args[0].Text, d.Args[0].Pos); ok {
				m.Hedge = v
				m.Mode = model.Hedge
			}
		case "timeout":
			b.applyTimeout(where, d, m)
			timeout = d
		case "default":
			b.applyDefault(where, d, m)
		case "service":
			b.diags.errorf(d.Pos, "//ff:service is on the method %s; it belongs in the doc comment of the interface type", where)
		default:
			b.unknown(where, d)
		}
	}
	if scatter != nil && hold != nil {
		b.diags.errorf(hold.Pos, "%s is both //ff:hold and //ff:scatter; a scattered operation cannot wait for its entity", where)
	}
	if scatter != nil && hedge != nil {
		b.diags.errorf(hedge.Pos, "%s is both //ff:hedge and //ff:scatter; a replicated write goes to its raft leader, the one node that orders it, so there is no other node to hedge to", where)
	}
	// //ff:linearizable with //ff:hedge is allowed: every attempt, the
	// hedged one too, waits on its own node for the writes committed before
	// it arrived, so whichever answers first is linearizable; and the hedge
	// still helps where such a read is slow on one node only, one behind in
	// applying the log.
	switch {
	case linearizable != nil && scatter != nil:
		b.diags.errorf(linearizable.Pos, "%s is both //ff:linearizable and //ff:scatter; //ff:linearizable is for reads, and a scattered write already runs in log order on every node", where)
	case linearizable != nil:
		b.linearizable = append(b.linearizable, linearizableUse{where, linearizable})
	}
	if !ok {
		return nil
	}
	if entity == nil {
		b.diags.errorf(b.src.pos(fn), "%s has no //ff:entity; name the parameter (or field path) that holds the entity ID, e.g. //ff:entity id", where)
	} else {
		for _, a := range entity.Args {
			if e := b.entity(where, fn, m, a); e != nil {
				m.Entities = append(m.Entities, e)
			}
		}
	}
	b.errorRules(where, md, m, dirs)
	b.checkSettings(where, m, timeout)
	return m
}

// checkSettings validates what generation knows of a method's settings:
// its //ff:timeout keys, the interface's, and the runtime's defaults for
// the keys neither sets. A method whose keys conflict with the defaults
// it inherits (operation=1ms under the default attempt timeout of 5s)
// would fail every call with default settings; the client it runs with is
// validated again, with its real settings, by runtime.NewClient.
func (b *builder) checkSettings(where string, m *model.Method, timeout *directive) {
	dirs := slices.DeleteFunc([]*directive{timeout, b.ifaceTimeout}, func(d *directive) bool { return d == nil })
	if len(dirs) == 0 {
		return
	}
	attempt := cmp.Or(m.AttemptTimeout, timeouts.Attempt)
	operation := cmp.Or(m.OperationTimeout, timeouts.Operation)
	heartbeat := cmp.Or(m.HeartbeatTimeout, timeouts.HeartbeatTimeout)
	for _, p := range timeouts.Check(timeouts.HeartbeatInterval, heartbeat, attempt, operation) {
		msg := settingNames.Replace(p)
		b.diags.errorf(timeoutArg(dirs, msg), "//ff:timeout on %s: %s; a key it leaves unset is the interface's or the runtime's default (attempt=%v operation=%v heartbeat=%v): set it too",
			where, msg, timeouts.Attempt, timeouts.Operation, timeouts.HeartbeatTimeout)
	}
}

// settingNames writes the runtime's setting names as //ff:timeout keys.
var settingNames = strings.NewReplacer("AttemptTimeout", "attempt", "OperationTimeout", "operation", "HeartbeatTimeout", "heartbeat", "MaxFailovers", "failovers")

// timeoutArg is the position of the key=value that msg names first,
// searched in the method's directive, then the interface's.
func timeoutArg(dirs []*directive, msg string) token.Pos {
	pos, first := dirs[0].Pos, len(msg)
	for _, d := range dirs {
		for _, a := range d.Args {
			key, _, _ := strings.Cut(a.Text, "=")
			if i := strings.Index(msg, key+" ("); i >= 0 && i < first {
				pos, first = a.Pos, i
			}
		}
		if first < len(msg) {
			break
		}
	}
	return pos
}

// sameDirectives accepts a second declaration of a method only with the
// directives of the first: the service cannot have two sets of them.
func (b *builder) sameDirectives(where string, fn *types.Func, md *methodDecl, dirs []*directive, other *types.Func) {
	omd := b.src.method(other)
	var odirs []*directive
	if omd != nil {
		odirs, _ = directivesOf(omd.field.Doc)
	}
	for _, d := range odirs {
		b.consumed[d.Pos] = true
	}
	if slices.EqualFunc(dirs, odirs, func(a, b *directive) bool { return a.text() == b.text() }) {
		return
	}
	declarer := func(md *methodDecl, fn *types.Func) string {
		name := "its service"
		if md != nil {
			name = md.iface
		}
		return fmt.Sprintf("%s (%s)", name, b.where(b.src.pos(fn)))
	}
	pos := b.src.pos(other)
	for i, d := range odirs {
		if i >= len(dirs) || d.text() != dirs[i].text() {
			pos = d.Pos
			break
		}
	}
	b.diags.errorf(pos, "%s is declared by %s and by %s with different //ff: directives; give both declarations the same directives, or put them on one and drop the other",
		where, declarer(md, fn), declarer(omd, other))
}

// where formats pos as file:line:col, relative to the working directory.
func (b *builder) where(pos token.Pos) string {
	p := b.fset.Position(pos)
	return fmt.Sprintf("%s:%d:%d", relative(p.Filename, b.cfg.dir()), p.Line, p.Column)
}

// argPos points at the directive's argument i, the first one that is
// wrong, or at the directive when it has no such argument.
func argPos(d *directive, i int) token.Pos {
	if i < len(d.Args) {
		return d.Args[i].Pos
	}
	return d.Pos
}

func (b *builder) noArgs(where string, d *directive) {
	if len(d.Args) > 0 {
		b.diags.errorf(d.Args[0].Pos, "%s on %s takes no arguments", d, where)
	}
}

// signature checks the method's shape: a context first, an error last.
func (b *builder) signature(where string, fn *types.Func, m *model.Method) bool {
	sig := fn.Signature()
	params, results := sig.Params(), sig.Results()
	ok := true
	if params.Len() == 0 || !isContext(params.At(0).Type()) {
		b.diags.errorf(b.src.pos(fn), "the first parameter of %s must be a context.Context", where)
		ok = false
	} else {
		m.CtxName = params.At(0).Name()
	}
	if results.Len() == 0 || !model.IsError(results.At(results.Len()-1).Type()) {
		b.diags.errorf(b.src.pos(fn), "the last result of %s must be an error", where)
		ok = false
	} else {
		m.ErrName = results.At(results.Len() - 1).Name()
	}
	if !ok {
		return false
	}
	m.Variadic = sig.Variadic()
	for i := 1; i < params.Len(); i++ {
		v := params.At(i)
		if isContext(v.Type()) {
			b.diags.errorf(b.src.varPos(fn, i, false), "%s has a second context.Context (%s); only the first parameter may be a context", where, v.Name())
		}
		m.Params = append(m.Params, &model.Var{Name: v.Name(), Type: v.Type()})
	}
	for i := 0; i < results.Len()-1; i++ {
		v := results.At(i)
		m.Results = append(m.Results, &model.Var{Name: v.Name(), Type: v.Type()})
	}
	return true
}

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

func (b *builder) applyDefault(where string, d *directive, m *model.Method) {
	if len(d.Args) != 1 || (d.Args[0].Text != "fail" && d.Args[0].Text != "failover") {
		b.diags.errorf(argPos(d, 0), "//ff:default on %s takes fail or failover", where)
		return
	}
	m.DefaultFailover = d.Args[0].Text == "failover"
}

// applyTimeout parses key=value settings: attempt, operation and heartbeat
// durations, and failovers, a count.
func (b *builder) applyTimeout(where string, d *directive, m *model.Method) {
	if len(d.Args) == 0 {
		b.diags.errorf(d.Pos, "//ff:timeout on %s needs settings, e.g. //ff:timeout attempt=2s operation=4s heartbeat=300ms failovers=2", where)
	}
	seen := map[string]bool{}
	for _, a := range d.Args {
		key, val, found := strings.Cut(a.Text, "=")
		if !found || val == "" {
			b.diags.errorf(a.Pos, "malformed //ff:timeout option %q on %s; write key=value with key attempt, operation, heartbeat or failovers", a.Text, where)
			continue
		}
		if seen[key] {
			b.diags.errorf(a.Pos, "//ff:timeout on %s sets %s twice", where, key)
			continue
		}
		seen[key] = true
		valPos := a.Pos + token.Pos(len(key)+1)
		switch key {
		case "attempt", "operation", "heartbeat":
			v, ok := b.duration(where, d, val, valPos)
			if !ok {
				continue
			}
			switch key {
			case "attempt":
				m.AttemptTimeout = v
			case "operation":
				m.OperationTimeout = v
			default:
				m.HeartbeatTimeout = v
			}
		case "failovers":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				b.diags.errorf(valPos, "malformed failovers=%s on %s; want a count, 0 or more", val, where)
				continue
			}
			m.MaxFailovers = &n
		default:
			b.diags.errorf(a.Pos, "unknown //ff:timeout option %q on %s; known: attempt, operation, heartbeat, failovers", key, where)
		}
	}
}

func (b *builder) duration(where string, d *directive, s string, pos token.Pos) (time.Duration, bool) {
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		b.diags.errorf(pos, "malformed duration %q in %s on %s; want a positive Go duration such as 250ms or 2s", s, d, where)
		return 0, false
	}
	return v, true
}
