package codec

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Generated codecs carry two standard types with these functions instead
// of their own methods, which lose what the caller relies on: the location
// of a time.Time, and the chain of an error.

// AppendTime appends t: its instant and offset (MarshalBinary) and the name
// of its location, so that a time in Europe/Paris decodes in Europe/Paris.
// The monotonic clock reading is not carried.
func AppendTime(b []byte, t time.Time) []byte {
	p, err := t.MarshalBinary()
	if err != nil {
		// Offsets that MarshalBinary refuses: carry the instant in UTC.
		p, _ = t.UTC().MarshalBinary()
	}
	b = AppendBytes(b, p)
	name := t.Location().String()
	if name == "Local" {
		// The receiver's Local is another place; the zone's abbreviation
		// and offset are what is known.
		name, _ = t.Zone()
	}
	return AppendString(b, name)
}

// ReadTime decodes a time written by AppendTime. The location is loaded by
// name (time.LoadLocation) when the receiver knows it and it gives the
// sender's offset at that instant; otherwise it is a fixed zone with the
// sender's name and offset.
func ReadTime(r *Reader) time.Time {
	var t time.Time
	if err := t.UnmarshalBinary(r.Bytes()); err != nil {
		r.Fail(err)
	}
	name := r.String()
	if name == "" || name == "UTC" && t.Location() == time.UTC {
		return t
	}
	_, offset := t.Zone()
	if loc := location(name); loc != nil {
		if _, o := t.In(loc).Zone(); o == offset {
			return t.In(loc)
		}
	}
	return t.In(time.FixedZone(name, offset))
}

// locations caches time.LoadLocation, which reads the zone database on
// every call; failures are cached as nil.
var locations sync.Map // name → *time.Location

func location(name string) *time.Location {
	if v, ok := locations.Load(name); ok {
		return v.(*time.Location)
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		loc = nil
	}
	locations.Store(name, loc)
	return loc
}

// sentinels are the standard library's errors that travel as themselves
// when they are in the chain of an error value.
var sentinels = []error{
	io.EOF, io.ErrUnexpectedEOF, io.ErrClosedPipe, io.ErrShortWrite, io.ErrShortBuffer, io.ErrNoProgress,
	context.Canceled, context.DeadlineExceeded,
	fs.ErrInvalid, fs.ErrPermission, fs.ErrExist, fs.ErrNotExist, fs.ErrClosed,
	os.ErrDeadlineExceeded, os.ErrProcessDone, os.ErrNoDeadline,
	errors.ErrUnsupported,
}

// Kinds of a link of an error chain on the wire.
const (
	linkSentinel = 1 // index into sentinels
	linkErrno    = 2 // GOOS, then the number
)

// AppendError appends err: nil, or its message and what of its chain a
// receiver can rebuild, the standard sentinels and a syscall.Errno, so that
// errors.Is(err, io.EOF) and errors.Is(err, syscall.ECONNREFUSED) hold on
// the other side. Other errors in the chain, and the types of the errors,
// are not carried.
func AppendError(b []byte, err error) []byte {
	if err == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = AppendString(b, err.Error())
	var links uint64 // bit i: sentinels[i] is in the chain
	count := 0
	for i, s := range sentinels {
		if errors.Is(err, s) {
			links |= 1 << i
			count++
		}
	}
	var errno syscall.Errno
	hasErrno := errors.As(err, &errno)
	if hasErrno {
		count++
	}
	b = AppendUvarint(b, uint64(count))
	for i := range sentinels {
		if links&(1<<i) != 0 {
			b = append(b, linkSentinel)
			b = AppendUvarint(b, uint64(i))
		}
	}
	if hasErrno {
		b = append(b, linkErrno)
		b = AppendString(b, runtime.GOOS)
		b = AppendUvarint(b, uint64(errno))
	}
	return b
}

// ReadError decodes an error written by AppendError: nil, or an error with
// the sender's message that unwraps to the sentinels it carried and to the
// syscall.Errno when sender and receiver run the same GOOS (errno numbers
// differ between systems).
func ReadError(r *Reader) error {
	if !r.Bool() {
		return nil
	}
	e := &wireError{msg: r.String()}
	n := r.Len32()
	for range n {
		switch r.Byte() {
		case linkSentinel:
			if i := r.Uvarint(); i < uint64(len(sentinels)) {
				e.chain = append(e.chain, sentinels[i])
			}
		case linkErrno:
			goos, num := r.String(), r.Uvarint()
			if goos == runtime.GOOS && num <= uint64(^uint32(0)) {
				e.chain = append(e.chain, syscall.Errno(num))
			}
		default:
			r.Fail(errors.New("codec: bad error link"))
			return e
		}
	}
	return e
}

// wireError is an error value rebuilt from the wire.
type wireError struct {
	msg   string
	chain []error
}

func (e *wireError) Error() string   { return e.msg }
func (e *wireError) Unwrap() []error { return e.chain }
