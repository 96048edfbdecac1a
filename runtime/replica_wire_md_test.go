package runtime

import (
	"bytes"
	"testing"

	"github.com/ffgen/ffgen/runtime/codec"
)

// TestEntryMetadataOptional: an entry without metadata is the bytes of the
// format before it (the flag byte reads as the old bool), and one with
// metadata round-trips.
func TestEntryMetadataOptional(t *testing.T) {
	en := &entry{index: 3, epoch: epoch{Term: 1, Node: "a1"}, opID: [16]byte{1}, method: "M", entities: []string{"x"}, payload: []byte("p")}
	plain := appendEntry(nil, en)
	if plain[len(plain)-1] != 0 {
		t.Fatalf("an unapplied entry without metadata must end with the byte false: % x", plain)
	}
	en.applied = true
	if b := appendEntry(nil, en); b[len(plain)-1] != 1 {
		t.Fatalf("applied must read as the byte true: % x", b)
	}
	en.md = []string{"k", "v"}
	r := codec.NewReader(appendEntry(nil, en))
	got := readEntry(&r)
	if err := r.Done(); err != nil {
		t.Fatal(err)
	}
	if !got.applied || len(got.md) != 2 || got.md[0] != "k" || got.md[1] != "v" || !bytes.Equal(got.payload, en.payload) {
		t.Errorf("round trip: %+v", got)
	}
	bad := appendEntry(nil, &entry{method: "M"})
	bad[len(bad)-1] = 0x80
	r = codec.NewReader(bad)
	readEntry(&r)
	if r.Done() == nil {
		t.Error("unknown entry flags were accepted")
	}
}
