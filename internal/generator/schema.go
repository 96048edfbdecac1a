package generator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/token"
	"go/types"
	"hash/fnv"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ffgen/ffgen/internal/generator/model"
)

// The schema of a service is what two versions of it must agree on to talk:
// the field numbers of its structs, the kinds of values its fields, parameters
// and results carry, each method's mode and entity, and its declared
// errors. ffgen records it at the end of the generated file, one JSON
// object per comment line, and reads it back the next time it generates the
// file: field numbers stay what they were (a new field gets a number never
// used in the struct, a removed one's number stays reserved), and a change
// that would break a running cluster mid-rollout is reported at its
// position, as buf breaking does for protobuf. -allow-breaking accepts the
// breaks on purpose; a field whose kind changed then gets a new number, so
// that the old and new versions skip each other's value instead of
// misreading it.

// schemaPrefix starts each line of the recorded schema.
const schemaPrefix = "// ffgen:schema "

// schemaEntry is one line of the recorded schema: a struct or a method.
type schemaEntry struct {
	Struct   string        `json:"struct,omitempty"`
	Fields   []schemaField `json:"fields,omitempty"`
	Reserved []schemaField `json:"reserved,omitempty"`

	Method  string        `json:"method,omitempty"`
	Mode    string        `json:"mode,omitempty"`
	Entity  string        `json:"entity,omitempty"`
	Params  []schemaField `json:"params,omitempty"`
	Results []schemaField `json:"results,omitempty"`
	Errors  []string      `json:"errors,omitempty"`
	// Compat is the method's compatibility version
	// (runtime.MethodSchema.Compat): raised by one when -allow-breaking
	// accepts a break of its mode, entity, parameters or results.
	Compat uint32 `json:"compat,omitempty"`
}

// schemaField is a field of a struct, or a parameter or result (numbered
// by position).
type schemaField struct {
	Name string `json:"name,omitempty"`
	Num  int    `json:"num"`
	Kind string `json:"kind"`
}

// readSchema returns the schema recorded in the generated file at path:
// nil when there is no file or it records none (a file of an older ffgen).
func readSchema(path string) (structs, methods map[string]*schemaEntry, err error) {
	src, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), schemaPrefix)
		if !ok {
			continue
		}
		var e schemaEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, nil, fmt.Errorf("%s: the recorded schema is damaged (%v); restore the file from version control", path, err)
		}
		if structs == nil {
			structs, methods = map[string]*schemaEntry{}, map[string]*schemaEntry{}
		}
		if e.Struct != "" {
			structs[e.Struct] = &e
		} else {
			methods[e.Method] = &e
		}
	}
	return structs, methods, sc.Err()
}

// evolve numbers the fields of file's structs from the schema recorded in
// the file it replaces, reports the breaking changes against it, and
// records the new schema in file.
func (b *builder) evolve(file *model.File) {
	svc := file.Service
	oldStructs, oldMethods, err := readSchema(file.Path)
	if err != nil {
		b.diags.errorf(svc.Type.Obj().Pos(), "%v", err)
		return
	}
	pkg := file.Pkg
	var lines []schemaEntry
	for _, t := range svc.Codec {
		s, ok := types.Unalias(t).Underlying().(*types.Struct)
		if !ok || model.Classify(t) != model.Struct {
			continue
		}
		name := typeString(t, pkg)
		e := b.numberStruct(svc, name, t, s, oldStructs[name], pkg)
		lines = append(lines, *e)
	}
	structs := map[string]*schemaEntry{}
	for i := range lines {
		structs[lines[i].Struct] = &lines[i]
	}
	seen := map[string]bool{}
	var methods []schemaEntry
	for _, m := range svc.Methods {
		e := methodSchema(m, pkg)
		seen[m.Name] = true
		if old := oldMethods[m.Name]; old != nil {
			e.Compat = old.Compat
			if b.compareMethod(svc, m, old, &e) {
				e.Compat++
			}
		}
		m.Schema = model.Schema{Compat: e.Compat, Args: argsFingerprint(&e, structs)}
		if m.Mode == model.Scatter {
			m.Schema.Fields = argFields(&e, structs)
		}
		methods = append(methods, e)
	}
	lines = append(lines, methods...)
	for name := range oldMethods {
		if !seen[name] {
			b.breaking(svc.Type.Obj().Pos(), "method %s.%s was removed: clients of the previous version still call it and will be told it is not implemented; deprecate it and keep serving it until no client calls it", svc.Name, name)
		}
	}
	var buf bytes.Buffer
	for _, e := range lines {
		j, _ := json.Marshal(e)
		buf.WriteString(schemaPrefix)
		buf.Write(j)
		buf.WriteByte('\n')
	}
	file.Schema = buf.String()
}

// breaking reports a breaking change, unless -allow-breaking accepts it.
func (b *builder) breaking(pos token.Pos, format string, args ...any) {
	if b.cfg.AllowBreaking {
		return
	}
	b.diags.errorf(pos, "breaking change: "+format+" (or run ffgen -allow-breaking to accept the break)", args...)
}

// numberStruct gives each encoded field of the struct t its number: the one
// its ff struct tag sets, the one the old schema recorded for its name, or
// one never used in the struct before.
func (b *builder) numberStruct(svc *model.Service, name string, t types.Type, s *types.Struct, old *schemaEntry, pkg *types.Package) *schemaEntry {
	e := &schemaEntry{Struct: name}
	prev := map[string]schemaField{} // by name, fields and reserved
	byNum := map[int]schemaField{}
	next := 1
	if old != nil {
		for _, f := range append(slices.Clone(old.Fields), old.Reserved...) {
			prev[f.Name] = f
			byNum[f.Num] = f
			next = max(next, f.Num+1)
		}
	}
	var nums []int
	used := map[int]string{}
	var fresh []*types.Var // fields that need a new number, numbered last
	for i := range s.NumFields() {
		f := s.Field(i)
		if f.Name() == "_" {
			continue
		}
		kind := kindOf(f.Type(), pkg)
		num := 0
		if tag, ok := reflect.StructTag(s.Tag(i)).Lookup("ff"); ok {
			n, err := strconv.Atoi(tag)
			if err != nil || n < 1 || n > int(protowire.MaxValidNumber) {
				b.diags.errorf(f.Pos(), "field %s of %s: the ff tag %q is not a field number (1 to %d)", f.Name(), name, tag, protowire.MaxValidNumber)
				continue
			}
			num = n
			if was, ok := byNum[n]; ok && was.Name != f.Name() && !compatibleKinds(was.Kind, kind) {
				b.breaking(f.Pos(), "field %s of %s takes number %d, which was %s (%s) in the previous version; a peer of that version would misread it; give it a number never used in %s", f.Name(), name, n, was.Name, was.Kind, name)
			}
		} else if was, ok := prev[f.Name()]; ok {
			num = was.Num
			if !compatibleKinds(was.Kind, kind) {
				b.breaking(f.Pos(), "field %s of %s changed from %s to %s, which the previous version cannot read; add a field with a new name instead, and stop using %s", f.Name(), name, was.Kind, kind, f.Name())
				num = 0 // accepted: a new number, so that neither side misreads the other's value
			}
		}
		if num == 0 {
			fresh = append(fresh, f)
			nums = append(nums, 0)
			continue
		}
		if other, dup := used[num]; dup {
			b.diags.errorf(f.Pos(), "field %s of %s has number %d, like field %s", f.Name(), name, num, other)
		}
		used[num] = f.Name()
		nums = append(nums, num)
		e.Fields = append(e.Fields, schemaField{Name: f.Name(), Num: num, Kind: kind})
	}
	for n := range used {
		next = max(next, n+1)
	}
	j := 0
	for i, n := range nums {
		if n != 0 {
			continue
		}
		f := fresh[j]
		j++
		nums[i] = next
		used[next] = f.Name()
		e.Fields = append(e.Fields, schemaField{Name: f.Name(), Num: next, Kind: kindOf(f.Type(), pkg)})
		next++
	}
	// Every number the struct ever used stays taken.
	if old != nil {
		for _, f := range append(slices.Clone(old.Fields), old.Reserved...) {
			if _, ok := used[f.Num]; !ok {
				e.Reserved = append(e.Reserved, f)
			}
		}
	}
	slices.SortFunc(e.Fields, func(a, b schemaField) int { return a.Num - b.Num })
	slices.SortFunc(e.Reserved, func(a, b schemaField) int { return a.Num - b.Num })
	svc.Numbers.Set(t, nums)
	return e
}

func modeName(m *model.Method) string {
	switch m.Mode {
	case model.Scatter:
		return "scatter"
	case model.Hedge:
		return "hedge"
	}
	return "failover"
}

func methodSchema(m *model.Method, pkg *types.Package) schemaEntry {
	e := schemaEntry{Method: m.Name, Mode: modeName(m)}
	var ents []string
	for _, en := range m.Entities {
		ents = append(ents, en.Text)
	}
	e.Entity = strings.Join(ents, " ")
	for i, p := range m.Params {
		e.Params = append(e.Params, schemaField{Name: p.Name, Num: i + 1, Kind: kindOf(p.Type, pkg)})
	}
	for i, r := range m.Results {
		e.Results = append(e.Results, schemaField{Name: r.Name, Num: i + 1, Kind: kindOf(r.Type, pkg)})
	}
	for _, r := range m.Errors {
		e.Errors = append(e.Errors, r.Code)
	}
	return e
}

// compareMethod reports what changed in m since old incompatibly. It
// returns whether the method itself broke (its mode, entity, a parameter
// or a result): its compatibility version is then raised, so that the old
// and new versions do not take each other's calls for their own.
func (b *builder) compareMethod(svc *model.Service, m *model.Method, old, cur *schemaEntry) (broke bool) {
	pos := m.Pos
	where := svc.Name + "." + m.Name
	if (old.Mode == "scatter") != (cur.Mode == "scatter") {
		broke = true
		b.breaking(pos, "%s changed from %s to %s: during a rollout the old and new nodes would run its calls differently (a replicated write on some, a call to one node on others); add a method with a new name instead", where, old.Mode, cur.Mode)
	}
	if old.Entity != cur.Entity {
		broke = true
		b.breaking(pos, "the entity of %s changed from %q to %q: old and new clients would route and order the same operation by different keys; add a method with a new name instead", where, old.Entity, cur.Entity)
	}
	compareVars := func(what string, olds, curs []schemaField) {
		for i, o := range olds {
			if i < len(curs) && !compatibleKinds(o.Kind, curs[i].Kind) {
				broke = true
				b.breaking(pos, "%s #%d of %s changed from %s to %s, which the previous version cannot read; add a method with a new name instead", what, i+1, where, o.Kind, curs[i].Kind)
			}
		}
	}
	compareVars("parameter", old.Params, cur.Params)
	compareVars("result", old.Results, cur.Results)
	for _, code := range old.Errors {
		if !slices.Contains(cur.Errors, code) {
			b.breaking(pos, "%s no longer declares %s: clients of the previous version match it with errors.Is or errors.As and would get an undeclared error instead; keep declaring it", where, code)
		}
	}
	return broke
}

// argsFingerprint is runtime.MethodSchema.Args for the method m records:
// an FNV-1a hash of its parameters' kinds and of the numbers and kinds of
// the fields of every struct they reach, by name, in a fixed order. Field
// names are left out (a rename that keeps the number reads the same), and
// so are results and declared errors, which a replica does not apply.
func argsFingerprint(m *schemaEntry, structs map[string]*schemaEntry) uint64 {
	kinds := make([]string, len(m.Params))
	for i, p := range m.Params {
		kinds[i] = p.Kind
	}
	return kindsFingerprint(kinds, structs)
}

// kindsFingerprint hashes kinds and the numbers and kinds of the fields of
// every struct they reach.
func kindsFingerprint(kinds []string, structs map[string]*schemaEntry) uint64 {
	h := fnv.New64a()
	seen := map[string]bool{}
	var visit func(kind string)
	visit = func(kind string) {
		io.WriteString(h, kind)
		h.Write([]byte{0})
		for _, name := range structsIn(kind, structs) {
			if seen[name] {
				continue
			}
			seen[name] = true
			fmt.Fprintf(h, "{%s", name)
			for _, f := range structs[name].Fields {
				fmt.Fprintf(h, " %d:", f.Num)
				visit(f.Kind)
			}
			h.Write([]byte{'}'})
		}
	}
	for _, k := range kinds {
		visit(k)
	}
	return h.Sum64()
}

// argFields is runtime.MethodSchema.Fields for the replicated write m
// records: every field its arguments can carry, "scope number name
// kind", the parameters in scope "(Method)" and each struct's fields in
// its own, the struct's name without spaces. A voter of another version
// can apply a write as sent when it knows each field the write carries
// with a kind that reads its value alike, so the kinds are the wire's:
// strings and byte slices are both bytes, int is int64. A kind the run
// time does not look into (a slice, a map, a pointer) that holds structs
// ends with their fingerprint, so that it is the same on both sides only
// if they are.
func argFields(m *schemaEntry, structs map[string]*schemaEntry) []string {
	var out []string
	seen := map[string]bool{}
	var visit func(scope string, fs []schemaField)
	visit = func(scope string, fs []schemaField) {
		for _, f := range fs {
			name := f.Name
			if name == "" {
				name = "_"
			}
			kind := wireKind(f.Kind)
			st, isStruct := strings.CutPrefix(f.Kind, "struct ")
			switch {
			case isStruct && structs[st] != nil:
				kind = "struct " + noSpace(st)
			case len(structsIn(f.Kind, structs)) > 0:
				kind = fmt.Sprintf("%s #%016x", f.Kind, kindsFingerprint([]string{f.Kind}, structs))
			}
			out = append(out, fmt.Sprintf("%s %d %s %s", scope, f.Num, name, kind))
			if isStruct && structs[st] != nil && !seen[st] {
				seen[st] = true
				visit(noSpace(st), structs[st].Fields)
			}
		}
	}
	visit("("+m.Method+")", m.Params)
	return out
}

// wireKind is the kind a value of kind k has on the wire, for kinds whose
// values two versions read alike.
func wireKind(k string) string {
	switch k {
	case "string":
		return "bytes"
	case "int":
		return "int64"
	case "uint", "uintptr":
		return "uint64"
	case "byte":
		return "uint8"
	case "rune":
		return "int32"
	}
	return k
}

func noSpace(s string) string { return strings.ReplaceAll(s, " ", "") }

// structsIn returns the recorded structs a kind names ("struct T",
// "[]struct T", "map[string]*struct T", …), sorted.
func structsIn(kind string, structs map[string]*schemaEntry) []string {
	var out []string
	for rest := kind; ; {
		i := strings.Index(rest, "struct ")
		if i < 0 {
			break
		}
		rest = rest[i+len("struct "):]
		end := strings.IndexAny(rest, " ]")
		if end < 0 {
			end = len(rest)
		}
		if name := rest[:end]; structs[name] != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// kindOf names what a value of t is on the wire, from which compatibleKinds
// decides whether one version can read what another sends.
func kindOf(t types.Type, pkg *types.Package) string {
	switch model.Classify(t) {
	case model.Bool:
		return "bool"
	case model.String:
		return "string"
	case model.Bytes:
		return "bytes"
	case model.Int, model.Uint, model.Float, model.Complex:
		return types.Unalias(t).Underlying().(*types.Basic).Name()
	case model.Error:
		return "error"
	case model.Time:
		return "time"
	case model.Marshaler:
		return "marshaler " + typeString(t, pkg)
	case model.Struct:
		return "struct " + typeString(t, pkg)
	}
	switch u := types.Unalias(t).Underlying().(type) {
	case *types.Pointer:
		return "*" + kindOf(u.Elem(), pkg)
	case *types.Slice:
		return "[]" + kindOf(u.Elem(), pkg)
	case *types.Array:
		return fmt.Sprintf("[%d]", u.Len()) + kindOf(u.Elem(), pkg)
	case *types.Map:
		return "map[" + kindOf(u.Key(), pkg) + "]" + kindOf(u.Elem(), pkg)
	}
	return typeString(t, pkg)
}

// compatibleKinds reports whether a value sent as kind a can be read as
// kind b: the same wire encoding. Integers of different sizes are
// compatible (a value that does not fit is refused when it is decoded,
// never wrapped), and so are floats, strings and bytes, arrays and slices,
// and any two structs (whose fields are compared struct by struct).
func compatibleKinds(a, b string) bool { return wireFamily(a) == wireFamily(b) }

func wireFamily(k string) string {
	switch {
	case strings.HasPrefix(k, "*"):
		return "*" + wireFamily(k[1:])
	case strings.HasPrefix(k, "[]"):
		return "[]" + wireFamily(k[2:])
	case strings.HasPrefix(k, "["):
		return "[]" + wireFamily(k[strings.Index(k, "]")+1:])
	case strings.HasPrefix(k, "map["):
		// The key kind ends at the bracket that balances map's.
		depth := 0
		for i := 3; i < len(k); i++ {
			switch k[i] {
			case '[':
				depth++
			case ']':
				depth--
				if depth == 0 {
					return "map[" + wireFamily(k[4:i]) + "]" + wireFamily(k[i+1:])
				}
			}
		}
		return k
	case strings.HasPrefix(k, "struct "), strings.HasPrefix(k, "marshaler "):
		return strings.Fields(k)[0]
	case strings.HasPrefix(k, "uint"), k == "byte":
		return "uint"
	case strings.HasPrefix(k, "int"), k == "rune":
		return "int"
	case strings.HasPrefix(k, "float"):
		return "float"
	case strings.HasPrefix(k, "complex"):
		return "complex"
	case k == "string", k == "bytes":
		return "bytes"
	}
	return k
}
