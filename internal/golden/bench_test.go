package golden

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ffgen/ffgen/internal/generator"
	"github.com/ffgen/ffgen/internal/golden/testdata/e2e"
	"github.com/ffgen/ffgen/runtime/codec"
)

// benchGenerate times a whole run of ffgen on one package, loading
// included, writing excluded.
func benchGenerate(b *testing.B, dir string, wantFiles int) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := generator.Generate(context.Background(), &generator.Config{Dir: abs})
		if err != nil || len(res.Diagnostics) > 0 || len(res.Files) != wantFiles {
			b.Fatalf("Generate: %v, %v, %d files", err, res.Diagnostics, len(res.Files))
		}
	}
}

// BenchmarkGenerateLarge: 20 interfaces of 10 methods.
func BenchmarkGenerateLarge(b *testing.B) { benchGenerate(b, "testdata/timing_large", 20) }

// BenchmarkGenerateSmall: the smallest case, one method.
func BenchmarkGenerateSmall(b *testing.B) { benchGenerate(b, "testdata/minimal", 1) }

// withdrawArgs returns the generated argument message of Ledger.Withdraw,
// decoded from its wire form.
func withdrawArgs(tb testing.TB) (codec.Message, []byte) {
	// Field 1, the Withdrawal: Account (1), Amount (2, zig-zag) and Memo
	// (3, a pointer: a message whose field 1 is the string).
	var memo, w, wire []byte
	memo = protowire.AppendTag(memo, 1, protowire.BytesType)
	memo = protowire.AppendString(memo, "rent")
	w = protowire.AppendTag(w, 1, protowire.BytesType)
	w = protowire.AppendString(w, "acct-0001")
	w = protowire.AppendTag(w, 2, protowire.VarintType)
	w = protowire.AppendVarint(w, protowire.EncodeZigZag(30))
	w = protowire.AppendTag(w, 3, protowire.BytesType)
	w = protowire.AppendBytes(w, memo)
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendBytes(wire, w)
	var m codec.Message
	for _, d := range e2e.LedgerDesc.Methods {
		if d.Name == "Withdraw" {
			m = d.NewArgs()
		}
	}
	if err := m.UnmarshalFF(wire); err != nil {
		tb.Fatal(err)
	}
	return m, wire
}

func TestGeneratedCodecAllocations(t *testing.T) {
	m, wire := withdrawArgs(t)
	buf := make([]byte, 0, 64)
	if got := m.AppendFF(buf[:0]); string(got) != string(wire) {
		t.Fatalf("re-encoding differs: %x, want %x", got, wire)
	}
	if n := testing.AllocsPerRun(100, func() { buf = m.AppendFF(buf[:0]) }); n != 0 {
		t.Errorf("AppendFF allocates %v times, want 0", n)
	}
	// Decoding allocates the strings and the pointer, nothing more.
	if n := testing.AllocsPerRun(100, func() { _ = m.UnmarshalFF(wire) }); n > 3 {
		t.Errorf("UnmarshalFF allocates %v times, want <= 3", n)
	}
}

func BenchmarkGeneratedAppend(b *testing.B) {
	m, _ := withdrawArgs(b)
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = m.AppendFF(buf[:0])
	}
}

func BenchmarkGeneratedUnmarshal(b *testing.B) {
	m, wire := withdrawArgs(b)
	for b.Loop() {
		if err := m.UnmarshalFF(wire); err != nil {
			b.Fatal(err)
		}
	}
}
