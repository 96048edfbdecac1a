package codec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"testing"
	"time"
	_ "time/tzdata" // the test must not depend on the machine's zone database
)

func TestTimeKeepsItsLocation(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []time.Time{
		time.Date(2024, 3, 31, 1, 59, 59, 999999999, paris), // before the change to summer time
		time.Date(2024, 3, 31, 3, 0, 0, 0, paris),           // after it
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 1, 2, 3, 4, 5, 6, time.FixedZone("X", -(3*3600+30*60))),
		{},
	} {
		r := NewReader(AppendTime(nil, in))
		out := ReadTime(&r)
		if err := r.Done(); err != nil {
			t.Fatalf("%v: %v", in, err)
		}
		inName, inOff := in.Zone()
		outName, outOff := out.Zone()
		if !out.Equal(in) || out.Location().String() != in.Location().String() || inName != outName || inOff != outOff {
			t.Errorf("%v (%s) came back as %v (%s)", in, in.Location(), out, out.Location())
		}
	}
}

func TestErrorKeepsWhatItsChainCanCarry(t *testing.T) {
	for _, tc := range []struct {
		err  error
		is   []error
		isnt []error
	}{
		{err: fmt.Errorf("dial: %w", &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}), is: []error{syscall.ECONNREFUSED}},
		{err: &fs.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, is: []error{syscall.ENOENT, fs.ErrNotExist}, isnt: []error{fs.ErrExist}},
		{err: fmt.Errorf("read: %w", io.ErrUnexpectedEOF), is: []error{io.ErrUnexpectedEOF}, isnt: []error{io.EOF}},
		{err: errors.Join(errors.New("a"), io.EOF), is: []error{io.EOF}},
		{err: errors.New("plain"), isnt: []error{io.EOF}},
	} {
		r := NewReader(AppendError(nil, tc.err))
		got := ReadError(&r)
		if err := r.Done(); err != nil {
			t.Fatalf("%v: %v", tc.err, err)
		}
		if got == nil || got.Error() != tc.err.Error() {
			t.Errorf("%v came back as %v", tc.err, got)
			continue
		}
		for _, target := range tc.is {
			if !errors.Is(got, target) {
				t.Errorf("%v: errors.Is(%v) is false on the receiver", tc.err, target)
			}
		}
		for _, target := range tc.isnt {
			if errors.Is(got, target) {
				t.Errorf("%v: errors.Is(%v) is true on the receiver", tc.err, target)
			}
		}
	}
	r := NewReader(AppendError(nil, nil))
	if err := ReadError(&r); err != nil || r.Done() != nil {
		t.Errorf("nil came back as %v (%v)", err, r.Done())
	}
}
