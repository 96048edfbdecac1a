package frame_test

import (
	"encoding/hex"
	"reflect"
	"testing"

	"github.com/ffgen/ffgen/runtime/codec"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/internal/frame/frametest"
)

func TestFramesOfThePreviousReleaseDecode(t *testing.T) {
	for _, c := range frametest.PreviousRelease {
		b, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		f, err := frame.Decode(b[4:])
		if err != nil {
			t.Errorf("%s: %v", c.Frame.Type(), err)
			continue
		}
		if !reflect.DeepEqual(f, c.Frame) {
			t.Errorf("%s decodes as %+v, want %+v", c.Frame.Type(), f, c.Frame)
		}
	}
}

// A Hello of a later revision, with fields this one does not know, is read:
// the fields it knows, and the rest skipped.
func TestHelloOfALaterRevisionDecodes(t *testing.T) {
	h := &frame.Hello{Version: frame.Version, Node: "n2", Group: "b", MaxFrame: 1 << 20, Revision: frame.Revision + 1, Caps: frame.Caps | 1<<9}
	b, err := frame.Append(nil, h, 0)
	if err != nil {
		t.Fatal(err)
	}
	b = codec.AppendString(b, "a field of the next revision")
	b[3] += byte(len(b) - 4 - int(b[3])) // the length prefix covers the new field
	f, err := frame.Decode(b[4:])
	if err != nil || !reflect.DeepEqual(f, h) {
		t.Fatalf("Decode = %+v, %v; want %+v", f, err, h)
	}
}
