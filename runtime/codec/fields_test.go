package codec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// A value decodes into a narrower field only when the field holds it
// exactly.
func TestNarrowingIsRefused(t *testing.T) {
	for _, c := range []struct {
		v    int64
		size int
		ok   bool
	}{
		{5_000_000_000, 32, false}, {-4_294_967_295, 32, false}, {math.MaxInt32, 32, true}, {math.MinInt32, 32, true},
		{128, 8, false}, {-128, 8, true}, {math.MinInt64, 64, true},
	} {
		b := protowire.AppendVarint(nil, protowire.EncodeZigZag(c.v))
		got, _, err := ConsumeVarintField(b, protowire.VarintType, c.size)
		var re *RangeError
		if c.ok && (err != nil || got != c.v) || !c.ok && !errors.As(err, &re) {
			t.Errorf("%d into %d bits: %d, %v", c.v, c.size, got, err)
		}
	}
	b := protowire.AppendVarint(nil, 1<<32)
	if _, _, err := ConsumeUvarintField(b, protowire.VarintType, 32); err == nil {
		t.Error("1<<32 fits in a uint32")
	}
	b = protowire.AppendFixed64(nil, math.Float64bits(0.1))
	if _, _, err := ConsumeFloatField(b, protowire.Fixed64Type, 32); err == nil {
		t.Error("0.1 fits in a float32 exactly")
	}
	if v, _, err := ConsumeFloatField(protowire.AppendFixed64(nil, math.Float64bits(0.5)), protowire.Fixed64Type, 32); err != nil || v != 0.5 {
		t.Errorf("0.5 into a float32: %v, %v", v, err)
	}
	if _, _, err := ConsumeVarintField([]byte{1}, protowire.BytesType, 64); err == nil || !strings.Contains(err.Error(), "changed incompatibly") {
		t.Errorf("a varint read from a bytes field: %v", err)
	}
}

// EndMessage writes lengths of more than one byte, and leaves out an empty
// message only when asked.
func TestNestedMessageLengths(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 20000} {
		b, mark := BeginMessage([]byte{0xaa}, 3)
		b = append(b, make([]byte, n)...)
		b = EndMessage(b, mark, 3, false)
		num, typ, k := protowire.ConsumeTag(b[1:])
		p, m := protowire.ConsumeBytes(b[1+k:])
		if num != 3 || typ != protowire.BytesType || m < 0 || len(p) != n || 1+k+m != len(b) {
			t.Errorf("length %d: %x…", n, b[:min(len(b), 8)])
		}
	}
	b, mark := BeginMessage([]byte{0xaa}, 3)
	if b = EndMessage(b, mark, 3, true); len(b) != 1 {
		t.Errorf("an empty message left out: %x", b)
	}
}

// A path of fields names where decoding failed, outermost first.
func TestFieldErrorPath(t *testing.T) {
	err := WrapField("o", WrapField("Qty", &RangeError{Value: "5000000000", Bits: 32}))
	var re *RangeError
	if err.Error() != "codec: field o.Qty: 5000000000 does not fit in a 32-bit integer" || !errors.As(err, &re) {
		t.Errorf("%v", err)
	}
}
