package cluster

import (
	"reflect"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []nodeMeta{
		{},
		{Group: "eu-1", RPCAddr: "10.0.0.1:9000", Services: []string{"bank.Accounts", "bank.Audit"}},
		{Leaving: true, Group: "g", RPCAddr: "[::1]:1"},
		{CatchingUp: true, Group: "g", RPCAddr: "a:1"},
		{Leaving: true, CatchingUp: true, Group: "g", RPCAddr: "a:1"},
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
