package codec

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = AppendUvarint(b, math.MaxUint64)
	b = AppendVarint(b, math.MinInt64)
	b = AppendVarint(b, -1)
	b = AppendBool(b, true)
	b = AppendBool(b, false)
	b = AppendFloat64(b, -2.5)
	b = AppendString(b, "héllo")
	b = AppendString(b, "")
	b = AppendBytes(b, []byte{1, 2, 3})
	b = AppendBytes(b, nil)

	r := NewReader(b)
	if got := r.Uvarint(); got != math.MaxUint64 {
		t.Errorf("Uvarint = %d", got)
	}
	if got := r.Varint(); got != math.MinInt64 {
		t.Errorf("Varint = %d", got)
	}
	if got := r.Varint(); got != -1 {
		t.Errorf("Varint = %d", got)
	}
	if got := r.Bool(); !got {
		t.Error("Bool = false, want true")
	}
	if got := r.Bool(); got {
		t.Error("Bool = true, want false")
	}
	if got := r.Float64(); got != -2.5 {
		t.Errorf("Float64 = %v", got)
	}
	if got := r.String(); got != "héllo" {
		t.Errorf("String = %q", got)
	}
	if got := r.String(); got != "" {
		t.Errorf("String = %q", got)
	}
	if got := r.Bytes(); string(got) != "\x01\x02\x03" {
		t.Errorf("Bytes = %v", got)
	}
	if got := r.Bytes(); got != nil {
		t.Errorf("empty Bytes = %v, want nil", got)
	}
	if err := r.Done(); err != nil {
		t.Fatalf("Done: %v", err)
	}
}

func TestReaderErrors(t *testing.T) {
	overflow := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	cases := []struct {
		name string
		in   []byte
		read func(*Reader)
		is   error
		msg  string
	}{
		{"empty uvarint", nil, func(r *Reader) { r.Uvarint() }, ErrShort, ""},
		{"cut uvarint", []byte{0x80}, func(r *Reader) { r.Uvarint() }, ErrShort, ""},
		{"long uvarint", overflow, func(r *Reader) { r.Uvarint() }, ErrOverflow, ""},
		{"long varint", overflow, func(r *Reader) { r.Varint() }, ErrOverflow, ""},
		{"cut float", []byte{1, 2, 3}, func(r *Reader) { r.Float64() }, ErrShort, ""},
		{"bad bool", []byte{2}, func(r *Reader) { r.Bool() }, nil, "neither 0 nor 1"},
		{"forged length", AppendUvarint(nil, 1<<40), func(r *Reader) { r.Bytes() }, ErrShort, "exceeds"},
		{"negative fixed", []byte{1}, func(r *Reader) { r.Fixed(-1) }, ErrShort, ""},
		{"trailing", []byte{1, 2}, func(r *Reader) { r.Byte() }, nil, "1 trailing bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.in)
			tc.read(&r)
			err := r.Done()
			if err == nil {
				t.Fatal("Done = nil, want an error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want it to mention %q", err, tc.msg)
			}
		})
	}
}

func TestReaderErrorSticks(t *testing.T) {
	b := AppendString(nil, "ok")
	r := NewReader(append([]byte{0x80}, b...))
	r.Fail(ErrOverflow)
	if got := r.String(); got != "" {
		t.Errorf("String after an error = %q, want empty", got)
	}
	if got := r.Uvarint(); got != 0 {
		t.Errorf("Uvarint after an error = %d, want 0", got)
	}
	r.Fail(ErrShort)
	if err := r.Err(); !errors.Is(err, ErrOverflow) {
		t.Errorf("Err = %v, want the first error", err)
	}
	r.Reset(b)
	if got := r.String(); got != "ok" || r.Done() != nil {
		t.Errorf("after Reset: %q, %v", got, r.Err())
	}
}

func TestReaderAllocs(t *testing.T) {
	b := AppendUvarint(nil, 7)
	b = AppendVarint(b, -7)
	b = AppendBytes(b, []byte("payload"))
	var r Reader
	n := testing.AllocsPerRun(100, func() {
		r.Reset(b)
		r.Uvarint()
		r.Varint()
		r.Bytes()
		if r.Done() != nil {
			t.Fatal("decode failed")
		}
	})
	if n != 0 {
		t.Errorf("decode allocates %v times, want 0", n)
	}
}

func TestBinaryCodecRejectsNonMessage(t *testing.T) {
	if _, err := Binary.Append(nil, 42); err == nil {
		t.Error("Append(int) = nil error")
	}
	if err := Binary.Unmarshal(nil, new(int)); err == nil {
		t.Error("Unmarshal(*int) = nil error")
	}
}
