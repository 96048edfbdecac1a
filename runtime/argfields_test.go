package runtime

import (
	"slices"
	"strings"
	"testing"

	"github.com/ffgen/ffgen/runtime/codec"
)

// transferV1 and transferV2 are a replicated write's arguments in two
// versions, as ffgen lists them: v2 adds Memo to the request and widens
// Fee from an int32 to an int64.
var (
	transferV1 = []string{
		"(Transfer) 1 req struct TransferRequest",
		"TransferRequest 1 From bytes",
		"TransferRequest 2 To bytes",
		"TransferRequest 3 Amount int64",
		"TransferRequest 5 Fee int32",
	}
	transferV2 = []string{
		"(Transfer) 1 req struct TransferRequest",
		"TransferRequest 1 From bytes",
		"TransferRequest 2 To bytes",
		"TransferRequest 3 Amount int64",
		"TransferRequest 5 Fee int64",
		"TransferRequest 6 Memo bytes",
	}
)

// transferArgs encodes a TransferRequest as the generated code does,
// leaving out the fields at zero.
func transferArgs(from, to string, amount, fee int64, memo string) []byte {
	b, mark := codec.BeginMessage(nil, 1)
	b = codec.AppendStringField(b, 1, from)
	b = codec.AppendStringField(b, 2, to)
	b = codec.AppendVarintField(b, 3, amount)
	if fee != 0 {
		b = codec.AppendVarintField(b, 5, fee)
	}
	if memo != "" {
		b = codec.AppendStringField(b, 6, memo)
	}
	return codec.EndMessage(b, mark, 1, false)
}

func mustArgFields(t testing.TB, lines []string) *argFields {
	a, err := parseArgFields("Transfer", lines)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func advertisement(a *argFields) []ServedMethod {
	ws := a.advertised(nil)
	slices.Sort(ws)
	return ws
}

func TestArgFieldsUnknownTo(t *testing.T) {
	v1, v2 := mustArgFields(t, transferV1), mustArgFields(t, transferV2)
	for _, tc := range []struct {
		name    string
		leader  *argFields
		voter   *argFields
		payload []byte
		want    string // "" when the voter can apply the write
	}{
		{"new field unset", v2, v1, transferArgs("a", "b", 5, 1, ""), ""},
		{"new field set", v2, v1, transferArgs("a", "b", 5, 0, "rent"), "Memo (6) of TransferRequest"},
		{"widened, value fits", v2, v1, transferArgs("a", "b", 5, -1<<31, ""), ""},
		{"widened, value does not fit", v2, v1, transferArgs("a", "b", 5, 1<<31, ""), "Fee (5) of TransferRequest = 2147483648"},
		{"older leader, newer voter", v1, v2, transferArgs("a", "b", 5, 1<<31-1, ""), ""},
		{"a field the leader does not know", v1, v2, transferArgs("a", "b", 5, 0, "rent"), "6 of TransferRequest (unknown here)"},
	} {
		u, found := tc.leader.unknownTo(tc.payload, advertisement(tc.voter))
		got := ""
		if found {
			got = u.String()
			if u.unknownHere {
				got += " (unknown here)"
			}
			if u.value != "" {
				got += " = " + u.value
			}
		}
		if got == "" && tc.want != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: unknownTo = %q, want %q", tc.name, got, tc.want)
		}
	}
	if _, found := v1.unknownTo([]byte{0xff}, advertisement(v2)); !found {
		t.Error("a payload that is not a message passed the check")
	}
	if _, err := parseArgFields("Transfer", []string{"TransferRequest one From bytes"}); err == nil {
		t.Error("a field without a number was parsed")
	}
	// A scalar kind that changed (bytes to int64) is not known.
	other := mustArgFields(t, append(slices.Clone(transferV1[:3]), "TransferRequest 3 Amount bytes"))
	if u, found := v1.unknownTo(transferArgs("a", "b", 5, 0, ""), advertisement(other)); !found || u.num != 3 {
		t.Errorf("Amount read as bytes: %+v, %v; want field 3 unknown", u, found)
	}
}

// A leader walks a write's arguments only when a voter runs another
// version; the walk allocates nothing when the voter can apply it.
func TestArgFieldsWalkAllocs(t *testing.T) {
	v1, v2 := mustArgFields(t, transferV1), mustArgFields(t, transferV2)
	ws := advertisement(v1)
	payload := transferArgs("alice", "bob", 5, 7, "")
	if n := testing.AllocsPerRun(100, func() {
		if _, found := v2.unknownTo(payload, ws); found {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Errorf("unknownTo: %v allocations, want 0", n)
	}
}

// What the check costs a write whose voter runs another version.
func BenchmarkArgFieldsWalk(b *testing.B) {
	v1, v2 := mustArgFields(b, transferV1), mustArgFields(b, transferV2)
	ws := advertisement(v1)
	payload := transferArgs("alice", "bob", 5, 7, "")
	b.ReportAllocs()
	for b.Loop() {
		if _, found := v2.unknownTo(payload, ws); found {
			b.Fatal("refused")
		}
	}
}
