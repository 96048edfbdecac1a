package runtime

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/protobuf/encoding/protowire"
)

// What a replicated write's arguments carry, field by field. A voter whose
// version of a write method reads its arguments otherwise (a field added,
// removed, or widened: another argument fingerprint) can still apply alike
// every write whose arguments carry only fields it knows, with kinds that
// read the values sent as they were sent: the fields it lacks are absent
// from those bytes, so that no version skips anything another applies.
// So each node advertises, beside its methods, one word per field its
// replicated writes' arguments can carry, and a leader that finds a voter
// advertising other arguments walks the write's bytes (protowire) and
// proposes it only if the voter knows every field they hold. See
// docs/ARCHITECTURE.md, "Schema identity at run time".

// fieldMark is the high 32 bits of a word that advertises an argument
// field rather than a method (see ServedMethod). servedOf never gives a
// method those bits.
const fieldMark = math.MaxUint32

// ArgField reports whether w advertises a field of a replicated write's
// arguments rather than a method. Such words sort after every method's.
func (w ServedMethod) ArgField() bool { return w>>32 == fieldMark }

// fieldWord is the word advertising the field num of scope with kind.
func fieldWord(scope string, num protowire.Number, kind string) ServedMethod {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(scope)
	d.WriteString(" ")
	d.WriteString(strconv.Itoa(int(num)))
	d.WriteString(" ")
	d.WriteString(kind)
	return ServedMethod(uint64(fieldMark)<<32 | uint64(uint32(d.Sum64())))
}

// The families of argument fields whose values a voter of another kind
// can read as sent: integers of any width (a value that fits it), floats
// (a float64 that a float32 holds exactly). Any other kind must be the
// same on both sides.
const (
	famExact = iota
	famSigned
	famUnsigned
	famFloat
)

// argField is one field that a method's arguments can carry.
type argField struct {
	num    protowire.Number
	name   string
	family int
	// words are the words a voter that reads this field's value as sent
	// may advertise: by width for integers (8, 16, 32, 64 bits) and floats
	// (32, 64), words[0] alone otherwise.
	words [4]ServedMethod
	width int // the index in words of this node's own kind
	sub   int // the scope of a struct's fields; -1 for other kinds
}

// argFields is what a replicated write method's arguments can carry, as
// its descriptor lists them (MethodSchema.Fields): scopes[0] are the
// parameters, and a struct's fields have a scope of their own.
type argFields struct {
	names  []string     // of the scopes
	scopes [][]argField // by scope
}

// parseArgFields reads a descriptor's Fields: "scope number name kind"
// each, where scope is "(Method)" for the method's parameters.
func parseArgFields(method string, lines []string) (*argFields, error) {
	a := &argFields{names: []string{"(" + method + ")"}, scopes: make([][]argField, 1)}
	scope := func(name string) int {
		i := slices.Index(a.names, name)
		if i < 0 {
			i = len(a.names)
			a.names = append(a.names, name)
			a.scopes = append(a.scopes, nil)
		}
		return i
	}
	for _, l := range lines {
		parts := strings.SplitN(l, " ", 4)
		if len(parts) != 4 {
			return nil, fmt.Errorf("method %s: argument field %q is not \"scope number name kind\"", method, l)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > int(protowire.MaxValidNumber) {
			return nil, fmt.Errorf("method %s: argument field %q has no valid number", method, l)
		}
		f := argField{num: protowire.Number(n), name: parts[2], sub: -1}
		kind := parts[3]
		var widths []string
		switch kind {
		case "int8", "int16", "int32", "int64":
			f.family, widths = famSigned, []string{"int8", "int16", "int32", "int64"}
		case "uint8", "uint16", "uint32", "uint64":
			f.family, widths = famUnsigned, []string{"uint8", "uint16", "uint32", "uint64"}
		case "float32", "float64":
			f.family, widths = famFloat, []string{"float32", "float64"}
		default:
			widths = []string{kind}
			if st, ok := strings.CutPrefix(kind, "struct "); ok {
				f.sub = scope(st)
			}
		}
		for i, w := range widths {
			f.words[i] = fieldWord(parts[0], f.num, w)
			if w == kind {
				f.width = i
			}
		}
		s := scope(parts[0])
		a.scopes[s] = append(a.scopes[s], f)
	}
	return a, nil
}

// advertised appends the words that say which fields this node knows.
func (a *argFields) advertised(dst []ServedMethod) []ServedMethod {
	for _, fs := range a.scopes {
		for i := range fs {
			dst = append(dst, fs[i].words[fs[i].width])
		}
	}
	return dst
}

// field returns the field num of scope, nil if this node does not know it.
func (a *argFields) field(scope int, num protowire.Number) *argField {
	fs := a.scopes[scope]
	for i := range fs {
		if fs[i].num == num {
			return &fs[i]
		}
	}
	return nil
}

// unknownField is a field a write carries that a voter cannot apply as
// sent.
type unknownField struct {
	scope string
	num   protowire.Number
	name  string
	// unknownHere: this node does not know the field either (a client of
	// a newer version sent it).
	unknownHere bool
	// value is set when the voter knows the field, but its kind cannot
	// hold the value sent.
	value string
	// malformed: the arguments are not a message in protobuf's wire
	// format.
	malformed bool
}

func (u *unknownField) String() string {
	what := fmt.Sprintf("field %d of %s", u.num, u.scope)
	if u.name != "" {
		what = fmt.Sprintf("field %s (%d) of %s", u.name, u.num, u.scope)
	}
	return what
}

// unknownTo returns the first field that payload, the arguments of a
// write, carries and that a voter advertising ws (sorted) cannot apply as
// sent: one it does not know, knows with another kind, or whose value its
// kind cannot hold; found is false when there is none.
func (a *argFields) unknownTo(payload []byte, ws []ServedMethod) (u unknownField, found bool) {
	return a.walk(payload, 0, ws)
}

func (a *argFields) walk(b []byte, scope int, ws []ServedMethod) (unknownField, bool) {
	knows := func(w ServedMethod) bool {
		_, ok := slices.BinarySearch(ws, w)
		return ok
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return unknownField{scope: a.names[scope], malformed: true}, true
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return unknownField{scope: a.names[scope], num: num, malformed: true}, true
		}
		val := b[:m]
		b = b[m:]
		f := a.field(scope, num)
		if f == nil {
			return unknownField{scope: a.names[scope], num: num, unknownHere: true}, true
		}
		known := false
		switch {
		case f.family == famSigned && typ == protowire.VarintType:
			u, _ := protowire.ConsumeVarint(val)
			v := protowire.DecodeZigZag(u)
			for i := range 4 {
				bits := 8 << i
				if v >= -1<<(bits-1) && v <= 1<<(bits-1)-1 && knows(f.words[i]) {
					known = true
					break
				}
			}
			if !known && a.knowsAny(f, ws) {
				return unknownField{scope: a.names[scope], num: num, name: f.name, value: strconv.FormatInt(v, 10)}, true
			}
		case f.family == famUnsigned && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(val)
			for i := range 4 {
				if (i == 3 || v < 1<<(8<<i)) && knows(f.words[i]) {
					known = true
					break
				}
			}
			if !known && a.knowsAny(f, ws) {
				return unknownField{scope: a.names[scope], num: num, name: f.name, value: strconv.FormatUint(v, 10)}, true
			}
		case f.family == famFloat && typ == protowire.Fixed64Type:
			u, _ := protowire.ConsumeFixed64(val)
			v := math.Float64frombits(u)
			known = knows(f.words[1]) || (math.IsNaN(v) || float64(float32(v)) == v) && knows(f.words[0])
			if !known && a.knowsAny(f, ws) {
				return unknownField{scope: a.names[scope], num: num, name: f.name, value: strconv.FormatFloat(v, 'g', -1, 64)}, true
			}
		case f.family == famExact:
			known = knows(f.words[0])
			if known && f.sub >= 0 && typ == protowire.BytesType {
				inner, _ := protowire.ConsumeBytes(val)
				if u, found := a.walk(inner, f.sub, ws); found {
					return u, true
				}
			}
		}
		if !known {
			return unknownField{scope: a.names[scope], num: num, name: f.name}, true
		}
	}
	return unknownField{}, false
}

// knowsAny reports whether the voter advertising ws knows f with a kind
// of its family, whatever its width.
func (a *argFields) knowsAny(f *argField, ws []ServedMethod) bool {
	for _, w := range f.words {
		if _, ok := slices.BinarySearch(ws, w); w != 0 && ok {
			return true
		}
	}
	return false
}
