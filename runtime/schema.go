package runtime

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Schema identity at run time. ffgen records each service's schema in the
// generated file (// ffgen:schema lines) and derives from it, per method, a
// MethodSchema that the descriptor carries. A node advertises, in its
// membership metadata, one ServedMethod per method it serves and per
// field its replicated writes' arguments can carry; a client routes a call
// to a node that serves its method compatibly, and the leader of a
// replicated service proposes a write only when every voter can apply it
// as sent: it serves the method with the same arguments, or knows every
// field the write carries (argfields.go). Design:
// docs/ARCHITECTURE.md, "Schema identity at run time".

// MethodSchema identifies a method's recorded schema. ffgen generates it;
// a descriptor written by hand may leave it zero.
type MethodSchema struct {
	// Compat is the method's compatibility version: 0, raised by one each
	// time ffgen -allow-breaking accepts a break of the method (its mode,
	// entity, or a parameter's or result's kind changed). Additive changes
	// (fields, results, declared errors, other methods) keep it: two
	// nodes serve a method compatibly when its name and Compat are equal.
	Compat uint32
	// Args fingerprints what the method's arguments carry: the kinds of
	// its parameters, and the numbers and kinds of the fields of every
	// struct they hold, as recorded. It changes with any change of them,
	// additive ones included: a replicated write is applied alike on
	// every voter only if each reads its arguments the same way.
	Args uint64
	// Fields lists, for a replicated write, every field its arguments can
	// carry, one "scope number name kind" each: scope is "(Method)" for
	// the parameters (numbered by position) and a struct's name for its
	// fields; kind is the field's kind as the wire carries it ("int32",
	// "bytes" for strings and byte slices, "struct DepositRequest", …).
	// A leader proposes a write that a voter of another argument
	// fingerprint can apply as sent: one whose arguments carry only
	// fields that the voter knows too.
	Fields []string
}

// ServedMethod is one word of what a node advertises of the methods it
// serves: for a method, the high 32 bits identify its name and
// compatibility version, the low 32 bits its arguments' fingerprint; a
// word whose high 32 bits are all ones (ArgField) names instead a field
// that the arguments of its replicated writes can carry, with its kind.
// Nodes compare them, never interpret them otherwise.
type ServedMethod uint64

// servedOf is the advertisement of m.
func servedOf(m *MethodDesc) ServedMethod {
	id := uint32(xxhash.Sum64String(m.Name) ^ uint64(m.Schema.Compat)*0x9e3779b97f4a7c15>>7)
	if id == fieldMark {
		id-- // the words of argument fields have those bits
	}
	args := uint32(m.Schema.Args ^ m.Schema.Args>>32)
	return ServedMethod(uint64(id)<<32 | uint64(args))
}

// compatible reports whether a node that advertises w serves the method of
// o compatibly: the same name and compatibility version.
func (w ServedMethod) compatible(o ServedMethod) bool { return w>>32 == o>>32 }

// servedMethods returns what a node serving svc advertises of it: one
// ServedMethod per method, and one per field that its replicated writes'
// arguments can carry, sorted.
func servedMethods(svc *ServiceDesc) []ServedMethod {
	out := make([]ServedMethod, 0, len(svc.Methods))
	for _, m := range svc.Methods {
		out = append(out, servedOf(m))
		if m.Mode == ModeScatter && len(m.Schema.Fields) > 0 {
			if a, err := parseArgFields(m.Name, m.Schema.Fields); err == nil {
				out = a.advertised(out)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// servesMethod reports whether m serves the method advertised as w
// compatibly. A member that advertises nothing for the service (a
// release before schema identity, or metadata without room for it) is
// taken to serve every method of it, as before.
func (m *Member) servesMethod(service string, w ServedMethod) bool {
	ws, ok := m.Methods[service]
	if !ok {
		return true
	}
	for _, x := range ws {
		if x.compatible(w) {
			return true
		}
	}
	return false
}

// argFieldsOf returns the words of the argument fields that m advertises
// for the service (sorted, after its methods'), empty if none: a node of
// a release that advertises methods alone.
func (m *Member) argFieldsOf(service string) []ServedMethod {
	ws := m.Methods[service]
	i, _ := slices.BinarySearch(ws, ServedMethod(uint64(fieldMark)<<32))
	return ws[i:]
}

// appliesAs reports whether m advertises exactly w for the service (the
// same method, compatibility version and arguments), and whether it
// advertises anything for the service at all.
func (m *Member) appliesAs(service string, w ServedMethod) (same, known bool) {
	ws, ok := m.Methods[service]
	if !ok {
		return false, false
	}
	_, found := slices.BinarySearch(ws, w)
	return found, true
}
