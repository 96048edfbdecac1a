package templates

import (
	"go/types"

	"github.com/dave/jennifer/jen"
	"golang.org/x/tools/go/types/typeutil"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// A service declares each distinct rule once, as a package-level var built
// by runtime.ErrorValue or runtime.ErrorType; methods list those vars. The
// same error under two directives is two rules.

// ruleKey identifies a distinct rule: the error as written, and its directive.
type ruleKey struct {
	code     string
	obj      types.Object // the value, or the error type's name
	pointer  bool
	failover bool
}

func keyOf(r *model.ErrorRule) ruleKey {
	k := ruleKey{code: r.Code, pointer: r.Pointer, failover: r.Failover}
	if r.Value != nil {
		k.obj = r.Value
	} else {
		k.obj = r.Type.Obj()
	}
	return k
}

// errorNames are the file-level names of a service's declared errors.
type errorNames struct {
	rules  map[ruleKey]string
	order  []*model.ErrorRule // the first occurrence of each rule, in method order
	codecs typeutil.Map       // error type E → *errorCodecNames
}

type errorCodecNames struct{ encode, decode string }

// errorType is the type E a rule for an error type matches.
func errorType(r *model.ErrorRule) types.Type {
	if r.Pointer {
		return types.NewPointer(r.Type)
	}
	return r.Type
}

// allocErrors names every distinct rule, and the encode and decode
// functions of every declared error type.
func (n *names) allocErrors(svc *model.Service) {
	n.errs.rules = map[ruleKey]string{}
	for _, m := range svc.Methods {
		for _, r := range m.Errors {
			k := keyOf(r)
			if _, ok := n.errs.rules[k]; ok {
				continue
			}
			var stem string
			if r.Value != nil {
				stem = upperFirst(r.Value.Name())
			} else {
				stem = typeStem(r.Type)
			}
			directive := "Fail"
			if r.Failover {
				directive = "Failover"
			}
			n.errs.rules[k] = n.own(stem + directive)
			n.errs.order = append(n.errs.order, r)
			if r.Type != nil && n.errs.codecs.At(errorType(r)) == nil {
				n.errs.codecs.Set(errorType(r), &errorCodecNames{
					encode: n.own("Encode" + stem),
					decode: n.own("Decode" + stem),
				})
			}
		}
	}
}

func (n *names) errorCodec(r *model.ErrorRule) *errorCodecNames {
	if r.Type == nil {
		return nil
	}
	h, _ := n.errs.codecs.At(errorType(r)).(*errorCodecNames)
	return h
}

// errorRules emits the service's rules, one var each.
func (g *gen) errorRules() {
	if len(g.n.errs.order) == 0 {
		return
	}
	defs := make([]jen.Code, len(g.n.errs.order))
	for i, r := range g.n.errs.order {
		directive := rt("Fail")
		if r.Failover {
			directive = rt("Failover")
		}
		var rule *jen.Statement
		if r.Value != nil {
			rule = rt("ErrorValue").Call(jen.Lit(r.Code), directive, g.qual(r.Value))
		} else {
			h := g.n.errorCodec(r)
			rule = rt("ErrorType").Call(jen.Lit(r.Code), directive, jen.Id(h.encode), jen.Id(h.decode))
		}
		defs[i] = jen.Id(g.n.errs.rules[keyOf(r)]).Op("=").Add(rule)
	}
	g.f.Commentf("The errors %s declares, one rule per error and directive.", g.svc.Name)
	if len(defs) == 1 {
		g.f.Var().Add(defs[0])
	} else {
		g.f.Var().Defs(defs...)
	}
	g.f.Line()
}

// methodErrors lists a method's rules, in the order declared.
func (g *gen) methodErrors(m *model.Method) jen.Code {
	rules := make([]jen.Code, len(m.Errors))
	for i, r := range m.Errors {
		rules[i] = jen.Id(g.n.errs.rules[keyOf(r)])
	}
	return jen.Index().Add(rt("ErrorRule")).Values(multiline(rules)...)
}

// errorCodecs emits, per declared error type E, the encode and decode
// functions runtime.ErrorType takes.
func (g *gen) errorCodecs() {
	done := map[*errorCodecNames]bool{}
	for _, r := range g.n.errs.order {
		h := g.n.errorCodec(r)
		if h == nil || done[h] {
			continue
		}
		done[h] = true
		g.errorEncode(r, h.encode)
		g.errorDecode(r, h.decode)
	}
}

func (g *gen) errorEncode(r *model.ErrorRule, name string) {
	sc := newScope(g.n.file)
	e, b := sc.name("e"), sc.name("b")
	var body []jen.Code
	val := place{val: jen.Id(e)}
	if r.Pointer {
		// errors.As matches a nil *T too; it has no detail to send.
		body = append(body, jen.If(jen.Id(e).Op("==").Nil()).Block(jen.Return(jen.Nil())))
		val = place{val: jen.Op("*").Id(e), ptr: jen.Id(e)}
	}
	// The detail is a message whose field 1 is the value.
	body = append(body, jen.Var().Id(b).Index().Byte())
	body = append(body, g.appendField(b, 1, r.Type, val, true)...)
	body = append(body, jen.Return(jen.Id(b)))
	g.f.Func().Id(name).Params(jen.Id(e).Add(g.typ(errorType(r)))).Index().Byte().Block(body...)
	g.f.Line()
}

func (g *gen) errorDecode(r *model.ErrorRule, name string) {
	sc := newScope(g.n.file)
	detail, e, err := sc.name("detail"), sc.name("e"), sc.name("err")
	var body []jen.Code
	val := place{val: jen.Id(e)}
	if r.Pointer {
		body = append(body, jen.Id(e).Op(":=").New(g.typ(r.Type)))
		val = place{val: jen.Op("*").Id(e), ptr: jen.Id(e)}
	} else {
		body = append(body, jen.Var().Id(e).Add(g.typ(r.Type)))
	}
	msg := []field{{num: 1, t: r.Type, store: assign(val)}}
	body = append(body, jen.Id(err).Op(":=").Add(g.decodeMessage(newLocals(sc), jen.Id(detail), msg)))
	body = append(body, jen.Return(jen.Id(e), jen.Id(err)))
	g.f.Func().Id(name).Params(jen.Id("_").String(), jen.Id(detail).Index().Byte()).Params(g.typ(errorType(r)), jen.Error()).Block(body...)
	g.f.Line()
}
