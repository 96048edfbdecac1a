package replica

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ffgen/ffgen/internal/frame"
)

func TestCommandRoundTrip(t *testing.T) {
	in := Command{OpID: [16]byte{1, 2, 3}, Method: "Deposit", Entities: []string{"a", "b"},
		Payload: []byte{0, 1, 2}, MD: []string{"x-trace", "t1"}}
	var out Command
	if err := out.Unmarshal(in.Marshal(nil)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
}

// A field a newer build adds is skipped, so that an older node still
// applies the write.
func TestCommandSkipsUnknownFields(t *testing.T) {
	in := Command{OpID: [16]byte{9}, Method: "Open"}
	b := in.Marshal(nil)
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("from a newer build"))
	b = protowire.AppendTag(b, 100, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	var out Command
	if err := out.Unmarshal(b); err != nil || out.Method != "Open" || out.OpID != in.OpID {
		t.Fatalf("Unmarshal = %+v, %v", out, err)
	}
}

// What a replica cannot decode is an error, which stops its apply there.
func TestCommandRefusesBadInput(t *testing.T) {
	good := (&Command{OpID: [16]byte{1}, Method: "Open"}).Marshal(nil)
	for name, b := range map[string][]byte{
		"truncated":       good[:len(good)-1],
		"no operation ID": (&Command{Method: "Open"}).Marshal(nil)[18:],
		"short ID":        append(protowire.AppendBytes(protowire.AppendTag(nil, cmdOpID, protowire.BytesType), []byte{1, 2}), good[18:]...),
		"odd metadata":    append(bytes.Clone(good), protowire.AppendString(protowire.AppendTag(nil, cmdMetadata, protowire.BytesType), "k")...),
		"garbage tag":     {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"length past end": {0x0a, 0x7f, 0x01},
	} {
		var c Command
		if err := c.Unmarshal(b); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, c)
		}
	}
}

func TestSnapshotDataRoundTrip(t *testing.T) {
	w := newWritten(10)
	w.put([16]byte{1}, 5, frame.Result{Status: frame.StatusOK, Payload: []byte("ok")})
	w.put([16]byte{2}, 6, frame.Result{Status: frame.StatusFail, Code: "ErrX", Message: "no", Payload: []byte{1}})
	in := &snapshotData{service: "bank.Accounts", written: w, names: map[uint64]string{7: "a1", 8: "b1"}, removed: map[uint64]bool{6: true, 1 << 63: true}, state: []byte("state")}
	out, err := unmarshalSnapshot(in.marshal(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if out.service != in.service || string(out.state) != "state" || !cmp.Equal(out.names, in.names) || !cmp.Equal(out.removed, in.removed) {
		t.Errorf("snapshot = %+v", out)
	}
	for _, id := range [][16]byte{{1}, {2}} {
		want, _ := w.get(id)
		got, ok := out.written.get(id)
		if !ok || got.index != want.index || got.result.Status != want.result.Status || got.result.Code != want.result.Code ||
			got.result.Message != want.result.Message || !bytes.Equal(got.result.Payload, want.result.Payload) {
			t.Errorf("recorded %x = %+v, %v; want %+v", id[:1], got, ok, want)
		}
	}
}

// A node takes a snapshot on its apply loop, which applies nothing
// meanwhile: the remembered writes go into one buffer, sized up front,
// without an allocation each.
func TestSnapshotDataMarshalAllocatesLittle(t *testing.T) {
	w := newWritten(1000)
	for i := range 1000 {
		w.put([16]byte{byte(i), byte(i >> 8)}, uint64(i), frame.Result{Status: frame.StatusOK, Payload: []byte("balance 12345")})
	}
	d := &snapshotData{service: "bank.Accounts", written: w, names: map[uint64]string{7: "a1"}, state: make([]byte, 1<<16)}
	if n := testing.AllocsPerRun(5, func() { d.marshal() }); n > 8 {
		t.Errorf("marshal of 1,000 written results allocated %v times, want at most 8", n)
	}
}

// A snapshot of another format, or that does not decode, is refused: a
// node never installs state it cannot trust.
func TestSnapshotDataRefusesBadInput(t *testing.T) {
	good := (&snapshotData{service: "s", written: newWritten(4), names: map[uint64]string{}, state: []byte{}}).marshal()
	newer := protowire.AppendVarint(protowire.AppendTag(nil, snapFormat, protowire.VarintType), snapshotFormat+1)
	for name, b := range map[string][]byte{
		"truncated":    good[:len(good)-1],
		"no format":    good[2:],
		"newer format": append(bytes.Clone(good), newer...),
		"record without ID": append(bytes.Clone(good),
			protowire.AppendBytes(protowire.AppendTag(nil, snapWritten, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, writtenIndex, protowire.VarintType), 3))...),
	} {
		if d, err := unmarshalSnapshot(b, 4); err == nil {
			t.Errorf("%s: decoded %+v, want an error", name, d)
		}
	}
}

// The table keeps the newest writes, forgetting the oldest first: every
// replica applies the same writes in the same order, so every replica
// forgets the same ones.
func TestWrittenKeepsTheNewest(t *testing.T) {
	w := newWritten(3)
	for i := range 5000 {
		w.put([16]byte{byte(i), byte(i >> 8)}, uint64(i), frame.Result{})
	}
	if w.len() != 3 {
		t.Fatalf("len = %d, want 3", w.len())
	}
	for i := range 5000 {
		_, ok := w.get([16]byte{byte(i), byte(i >> 8)})
		if want := i >= 4997; ok != want {
			t.Errorf("write %d remembered = %v, want %v", i, ok, want)
		}
	}
	var order []uint64
	w.each(func(_ [16]byte, r writtenResult) { order = append(order, r.index) })
	if !slices.Equal(order, []uint64{4997, 4998, 4999}) {
		t.Errorf("each walks %v, want the newest three oldest first", order)
	}
	w.put([16]byte{0x87, 0x13}, 1, frame.Result{}) // 4999 again: not added twice
	if r, _ := w.get([16]byte{0x87, 0x13}); r.index != 4999 {
		t.Errorf("a repeated ID replaced the first record: %+v", r)
	}
}

// A peer's split message is gathered in order, up to a bound: parts out of
// order, of another message, or past the bound drop what was gathered.
func TestAssemblyIsBounded(t *testing.T) {
	var a assembly
	part := func(msg uint64, seq, total uint32, n int) *chunk {
		return &chunk{msg: msg, seq: seq, total: total, data: bytes.Repeat([]byte{byte(seq)}, n)}
	}
	if b, err := a.add(part(1, 0, 2, 10), 100); b != nil || err != nil {
		t.Fatalf("first part: %v, %v", b, err)
	}
	b, err := a.add(part(1, 1, 2, 10), 100)
	if err != nil || len(b) != 20 {
		t.Fatalf("last part: %d bytes, %v", len(b), err)
	}
	for name, steps := range map[string][]*chunk{
		"out of order":  {part(2, 0, 3, 1), part(2, 2, 3, 1)},
		"other message": {part(3, 0, 3, 1), part(4, 1, 3, 1)},
		"too large":     {part(5, 0, 3, 60), part(5, 1, 3, 60)},
	} {
		var a assembly
		var err error
		for _, c := range steps {
			_, err = a.add(c, 100)
		}
		if err == nil || len(a.buf) != 0 {
			t.Errorf("%s: err %v, %d bytes kept", name, err, len(a.buf))
		}
	}
	var c chunk
	if err := c.unmarshal((&chunk{msg: 1, seq: 3, total: 3}).marshal()); err == nil || !strings.Contains(err.Error(), "chunk 3 of 3") {
		t.Errorf("a part past the total: %v", err)
	}
}

func FuzzCommandUnmarshal(f *testing.F) {
	f.Add((&Command{OpID: [16]byte{1}, Method: "Open", Entities: []string{"a"}, Payload: []byte{1}}).Marshal(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if c.Unmarshal(b) != nil {
			return
		}
		var again Command
		if err := again.Unmarshal(c.Marshal(nil)); err != nil || !cmp.Equal(c, again, cmpopts.EquateEmpty()) {
			t.Fatalf("re-encoded command differs: %+v, %+v, %v", c, again, err)
		}
	})
}

func FuzzSnapshotUnmarshal(f *testing.F) {
	f.Add((&snapshotData{service: "s", written: newWritten(4), names: map[uint64]string{1: "a"}, state: []byte{1}}).marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		unmarshalSnapshot(b, 16) // must not panic, whatever b holds
	})
}
