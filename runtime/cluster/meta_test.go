package cluster

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []nodeMeta{
		{},
		{Group: "eu-1", RPCAddr: "10.0.0.1:9000", Services: []string{"bank.Accounts", "bank.Audit"}},
		{Leaving: true, Group: "g", RPCAddr: "[::1]:1"},
		{CatchingUp: true, Group: "g", RPCAddr: "a:1"},
		{Leaving: true, CatchingUp: true, Group: "g", RPCAddr: "a:1"},
		{Group: "g", RPCAddr: "a:1", Services: []string{"bank.Accounts", "x.Y"},
			Methods: map[string][]runtime.ServedMethod{"bank.Accounts": {1, 0xfeedface00000002}, "x.Y": {}}},
		{Group: "g", RPCAddr: "a:1", Services: []string{"bank.Accounts"},
			Methods: map[string][]runtime.ServedMethod{"bank.Accounts": {1}}, Boot: 0x8000000000000a01},
	} {
		b, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMeta(b)
		if err != nil {
			t.Fatalf("decode(%x): %v", b, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

// preSchemaEntries decodes b as the release before schema identity did,
// strictly, and returns every services entry, each taken for a name.
func preSchemaEntries(t *testing.T, b []byte) []string {
	t.Helper()
	r := codec.NewReader(b[1:])
	r.Byte()
	_, _ = r.String(), r.String() // group, RPC address
	var names []string
	for range r.Len32() {
		names = append(names, r.String())
	}
	if err := r.Done(); err != nil {
		t.Fatalf("the release before schema identity refuses the metadata: %v", err)
	}
	return names
}

// The release before schema identity decodes metadata strictly (nothing
// may follow the services) and reads every services entry as a name: the
// methods travel as entries that name no service it could be asked for.
func TestMetaMethodsReadByThePreviousRelease(t *testing.T) {
	m := nodeMeta{Group: "g", RPCAddr: "a:1", Services: []string{"bank.Accounts"},
		Methods: map[string][]runtime.ServedMethod{"bank.Accounts": {7, 9}}}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	names := preSchemaEntries(t, b)
	if len(names) != 2 || names[0] != "bank.Accounts" || !strings.HasPrefix(names[1], methodsMark) {
		t.Errorf("the previous release reads services %q", names)
	}
	// Argument fields that do not fit are left out first, then methods;
	// never the node.
	fields := make([]runtime.ServedMethod, memberlist.MetaMaxSize/8)
	for i := range fields {
		fields[i] = runtime.ServedMethod(0xffffffff00000000 | uint64(i))
	}
	m.Methods["bank.Accounts"] = append([]runtime.ServedMethod{7, 9}, fields...)
	if b, err = m.encode(); err != nil {
		t.Fatal(err)
	}
	if got, err := decodeMeta(b); err != nil || !reflect.DeepEqual(got.Methods["bank.Accounts"], []runtime.ServedMethod{7, 9}) {
		t.Errorf("oversized argument fields: %+v, %v; want the methods without them", got, err)
	}
	m.Methods["bank.Accounts"] = make([]runtime.ServedMethod, memberlist.MetaMaxSize/8)
	if b, err = m.encode(); err != nil {
		t.Fatal(err)
	}
	if got, err := decodeMeta(b); err != nil || got.Methods != nil || len(got.Services) != 1 {
		t.Errorf("oversized methods: %+v, %v; want the services without methods", got, err)
	}
}

// The process's boot travels as a services entry that the release before
// it skips (it does not decode as methods), and the release before schema
// identity takes for a service nobody calls.
func TestMetaBootReadByThePreviousReleases(t *testing.T) {
	m := nodeMeta{Group: "g", RPCAddr: "a:1", Services: []string{"bank.Accounts"}, Boot: 0x0102030405060708}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	entries := preSchemaEntries(t, b)
	var boot []string
	for _, e := range entries {
		if strings.HasPrefix(e, methodsMark) {
			boot = append(boot, e)
		}
	}
	if len(boot) != 1 {
		t.Fatalf("entries %q: want one besides the service", entries)
	}
	if svc, ws, ok := methodsEntry(boot[0]); ok {
		t.Errorf("the release before reads the boot entry as methods of %q: %v", svc, ws)
	}
}

func TestMetaRejectsBadInput(t *testing.T) {
	good, _ := nodeMeta{Group: "g", RPCAddr: "a:1", Services: []string{"s"}}.encode()
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"empty":          {nil, "no metadata"},
		"other version":  {[]byte{9, 0}, "version 9"},
		"truncated":      {good[:len(good)-1], "exceeds"},
		"trailing bytes": {append(good[:len(good):len(good)], 0), "trailing"},
		"forged count":   {[]byte{metaVersion, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, "exceeds"},
	} {
		if _, err := decodeMeta(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := nodeMeta{Group: "g", RPCAddr: "a:1", Services: []string{"s", "t"}}.encode()
	f.Add(good)
	f.Add([]byte{metaVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		// Whatever decodes survives a round trip (unknown flag bits,
		// from a newer version, are dropped).
		again, err := m.encode()
		if err != nil {
			return
		}
		m2, err := decodeMeta(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("decode(%x) = %+v; re-encoded %x decodes as %+v, %v", b, m, again, m2, err)
		}
	})
}
