package generator

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// schemaOf returns each method's generated runtime.MethodSchema literal.
func schemaOf(t *testing.T, path string) map[string]string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	re := regexp.MustCompile(`(?s)Name:\s+"(\w+)",.*?Schema:\s+(runtime\.MethodSchema\{[^}]*\})`)
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		out[m[1]] = m[2]
	}
	return out
}

const ordersV1 = `package p

import "context"

type Order struct {
	ID  string
	Qty int64
}

type Receipt struct{ ID string }

//ff:service
type Orders interface {
	//ff:entity o.ID
	//ff:scatter
	Place(ctx context.Context, o Order) (Receipt, error)
	//ff:entity id
	Find(ctx context.Context, id string) (Order, error)
	//ff:entity id
	Drop(ctx context.Context, id string) error
}
`

// A method's schema identity at run time follows what the recorded schema
// says a peer must agree on: a result field keeps every argument
// fingerprint, an argument field changes its method's (and only its),
// and a break accepted with -allow-breaking raises the method's
// compatibility version, which the next generation keeps.
func TestSchemaIdentity(t *testing.T) {
	dir := module(t, map[string]string{"orders.go": ordersV1})
	out := filepath.Join(dir, "orders_ff.go")
	gen := func(src string, allow bool) map[string]string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "orders.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := run(t, Config{Dir: dir, AllowBreaking: allow}); code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		return schemaOf(t, out)
	}
	v1 := gen(ordersV1, false)
	if len(v1) != 3 || v1["Place"] == v1["Find"] {
		t.Fatalf("schemas %v", v1)
	}
	if again := gen(ordersV1, false); again["Place"] != v1["Place"] {
		t.Fatalf("not deterministic: %s then %s", v1["Place"], again["Place"])
	}
	resultField := regexp.MustCompile(`type Receipt struct\{ ID string \}`).ReplaceAllString(ordersV1, "type Receipt struct{ ID, Note string }")
	if v := gen(resultField, false); v["Place"] != v1["Place"] || v["Find"] != v1["Find"] {
		t.Errorf("a result field changed the argument fingerprints: %v, was %v", v, v1)
	}
	argField := regexp.MustCompile(`Qty int64`).ReplaceAllString(resultField, "Qty int64\n\tNote string")
	v2 := gen(argField, false)
	if v2["Place"] == v1["Place"] {
		t.Errorf("a field added to Place's arguments kept its fingerprint %s", v2["Place"])
	}
	if v2["Drop"] != v1["Drop"] {
		t.Errorf("Drop's schema changed with another method's arguments: %s, was %s", v2["Drop"], v1["Drop"])
	}
	broken := regexp.MustCompile(`(?s)//ff:entity id\n\tDrop`).ReplaceAllString(argField, "//ff:entity id\n\t//ff:scatter\n\tDrop")
	v3 := gen(broken, true)
	if want := regexp.MustCompile(`Compat: 1,`); !want.MatchString(v3["Drop"]) {
		t.Errorf("Drop after an accepted break of its mode: %s, want compatibility version 1", v3["Drop"])
	}
	if v := gen(broken, false); v["Drop"] != v3["Drop"] {
		t.Errorf("the next generation lost the compatibility version: %s, was %s", v["Drop"], v3["Drop"])
	}
}

// A replicated write's descriptor lists the fields its arguments can
// carry with the kinds the wire gives them: the run time compares them
// with what each voter knows, write by write.
func TestArgFields(t *testing.T) {
	structs := map[string]*schemaEntry{
		"Order": {Struct: "Order", Fields: []schemaField{
			{Name: "ID", Num: 1, Kind: "string"},
			{Name: "Qty", Num: 3, Kind: "int"},
			{Name: "Lines", Num: 4, Kind: "[]struct Line"},
			{Name: "Next", Num: 5, Kind: "struct Order"},
		}},
		"Line": {Struct: "Line", Fields: []schemaField{{Name: "SKU", Num: 1, Kind: "[]byte"}}},
	}
	m := &schemaEntry{Method: "Place", Params: []schemaField{
		{Name: "o", Num: 1, Kind: "struct Order"},
		{Num: 2, Kind: "uint"},
	}}
	got := argFields(m, structs)
	want := []string{
		"(Place) 1 o struct Order",
		"Order 1 ID bytes",
		"Order 3 Qty int64",
		"Order 4 Lines []struct Line #",
		"Order 5 Next struct Order",
		"(Place) 2 _ uint64",
	}
	if len(got) != len(want) {
		t.Fatalf("argFields = %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("argFields[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	// A slice of structs carries their fingerprint: a field added to Line
	// changes it.
	before := got[3]
	structs["Line"].Fields = append(structs["Line"].Fields, schemaField{Name: "Qty", Num: 2, Kind: "int32"})
	if after := argFields(m, structs)[3]; after == before {
		t.Errorf("a field added to Line left %q as it was", after)
	}
}
