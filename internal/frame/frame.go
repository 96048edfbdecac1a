// Package frame is the wire format of the fast-failover protocol: the
// frames nodes exchange, each a length-prefixed, versioned binary record,
// their encoding (Append) and their decoding (Decoder). Reading frames off
// a connection, with its limits and deadlines, is runtime/transport's.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"
)

// Version is the protocol version this package speaks. Every frame carries it;
// a frame of another version is rejected and its connection closed.
const Version = 1

// Revision is the revision of protocol Version that this package speaks. It
// grows by one whenever a frame gains a field or a type that a peer must
// know about before it is sent (see docs/ARCHITECTURE.md, "Growing the
// format"); the Hello says it, so that each side knows what the other reads,
// and a mismatch is named instead of guessed. A Hello of a release before
// revisions has none: revision 0.
//
// Revision 2: Heartbeat.Late.
const Revision = 2

// Capabilities a node announces in its Hello (Hello.Caps).
const (
	// CapTaggedPayloads: the node encodes and decodes payloads in the
	// tagged format (protobuf's wire format with recorded field numbers),
	// in which fields added or removed by another version are skipped.
	CapTaggedPayloads uint64 = 1 << 0
	// CapAtLimit, in the Hello of a node that accepted a connection past
	// its connection limit (transport.TCPConfig.MaxConns): the node is busy, not
	// gone, and closes the connection right after the Hello. A dialer
	// reports transport.ErrAtLimit, which its runtime neither suspects the node for
	// nor fails over on; a peer that predates it sees a closed
	// connection, as it did before.
	CapAtLimit uint64 = 1 << 1
)

// Caps are the capabilities this package announces.
const Caps = CapTaggedPayloads

// HeaderSize is the size of a frame header: a 4-byte big-endian length of
// what follows it (version, type and body), then the version and type bytes.
const HeaderSize = 6

// DefaultMaxSize bounds one frame (header excluded) unless configured.
const DefaultMaxSize = 4 << 20

// Type names the kind of a frame.
type Type uint8

// The frame types. Values are part of the wire format.
const (
	TypeHello     Type = 1
	TypeAttempt   Type = 2
	TypeHeartbeat Type = 3
	TypeResult    Type = 4
	TypeCancel    Type = 5
	TypeRedirect  Type = 6
	TypeReplica   Type = 7
	TypeAck       Type = 8
)

func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeAttempt:
		return "attempt"
	case TypeHeartbeat:
		return "heartbeat"
	case TypeResult:
		return "result"
	case TypeCancel:
		return "cancel"
	case TypeRedirect:
		return "redirect"
	case TypeReplica:
		return "replica"
	case TypeAck:
		return "ack"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Frame is one protocol message: *Hello, *Attempt, *Heartbeat, *Result,
// *Cancel, *Redirect, *Replica or *Ack.
type Frame interface {
	Type() Type
	appendBody(b []byte) []byte
	decodeBody(r *codec.Reader)
}

// Errors from encoding and decoding. Each is wrapped with detail; match
// with errors.Is. runtime/transport gives them to users under its own
// names (transport.ErrFrameTooLarge and so on), so their text names it.
var (
	ErrTooLarge    = errors.New("transport: frame exceeds the maximum frame size")
	ErrBadVersion  = errors.New("transport: unsupported protocol version")
	ErrUnknownType = errors.New("transport: unknown frame type")
	ErrMalformed   = errors.New("transport: malformed frame")
)

// IsInvalid reports whether err means that bytes are not a frame this
// node accepts (malformed, of another version, of an unknown type, or too
// large), as opposed to the connection carrying them failing.
func IsInvalid(err error) bool {
	return errors.Is(err, ErrMalformed) || errors.Is(err, ErrBadVersion) ||
		errors.Is(err, ErrUnknownType) || errors.Is(err, ErrTooLarge)
}

// Hello opens every connection, in both directions.
type Hello struct {
	Version uint8  // highest protocol version the sender speaks
	Node    string // sender's node name
	Group   string // sender's failure group
	// MaxFrame is the largest frame the sender accepts, 0 if it does not
	// say (an older peer). A sender keeps its frames within the peer's
	// limit, so an oversized payload fails at Send instead of costing the
	// connection.
	MaxFrame uint32
	// Revision and Caps: the sender's Revision and capabilities, 0 from a
	// peer that predates them.
	Revision uint32
	Caps     uint64
}

// String names the sender and what it speaks, for errors and logs.
func (h *Hello) String() string {
	return fmt.Sprintf("peer %q speaks protocol %d revision %d", h.Node, h.Version, h.Revision)
}

// Status is the outcome of an attempt as the server reports it.
type Status uint8

// Result statuses. Values are part of the wire format.
const (
	StatusOK       Status = 0 // Payload holds the result
	StatusFail     Status = 1 // give the error to the caller
	StatusFailover Status = 2 // try the next failure group
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusFail:
		return "fail"
	case StatusFailover:
		return "failover"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// AttemptFlags carry per-attempt behaviour to the server.
type AttemptFlags uint32

// Attempt flags. Values are part of the wire format.
const (
	FlagHold    AttemptFlags = 1 << 0 // wait until no operation runs on the entity
	FlagScatter AttemptFlags = 1 << 1 // a replicated write, for the service's raft leader
	FlagHedge   AttemptFlags = 1 << 2 // one of a hedge's concurrent attempts; it may be cancelled
	// FlagAck says the client reads Ack frames. A server sends them only
	// to clients that set it, so that an older client, which would close
	// the connection on an unknown frame type, gets none.
	FlagAck AttemptFlags = 1 << 3
	// FlagNoRepeat: the client will not send this operation to this node
	// again (it drew the ID itself and its attempts go to distinct
	// groups), so the node need not remember the result.
	FlagNoRepeat AttemptFlags = 1 << 4
	// FlagAllBeat says the client counts a Heartbeat with All set as one
	// for every attempt the server acknowledged on the connection. A
	// server sends All only for attempts with it, and lists the others in
	// every heartbeat: an older client, which would take All's byte for a
	// malformed frame, gets none and still hears of each attempt.
	FlagAllBeat AttemptFlags = 1 << 5
)

// Prior records why an earlier attempt of the same operation ended.
type Prior struct {
	Node   string
	Group  string
	Reason uint8 // a runtime.Reason
}

// Attempt asks the server to run one try of an operation.
type Attempt struct {
	Call      uint64        // the sender's stream number, unique on the connection
	OpID      [16]byte      // the operation's random ID
	Number    uint32        // attempt number, 0 for the first
	Timeout   time.Duration // how long the server may work on it (relative: clocks differ)
	Heartbeat time.Duration // the heartbeat interval the client expects
	Service   string
	Method    string
	Entities  []string // the first one routes
	Flags     AttemptFlags
	History   []Prior // why earlier attempts ended, oldest first
	Progress  []byte  // the last progress the client saw, if any
	Payload   []byte  // the encoded arguments
	// Metadata is the call's metadata as alternating keys and values. It
	// follows the payload only when there is some, so an Attempt without
	// it is the same bytes as before the field existed.
	Metadata []string
}

// HeartbeatItem is one running attempt in a Heartbeat frame.
type HeartbeatItem struct {
	Call     uint64
	Progress []byte // optional; nil when the handler reported none since last time
}

// Heartbeat says "still working" for every listed attempt: the server sends
// one per connection per interval, however many attempts run.
type Heartbeat struct {
	Items []HeartbeatItem
	// All says "still working" for every attempt the server acknowledged
	// on this connection and has not answered, of clients that set
	// FlagAllBeat; Items then lists only the attempts with progress to
	// report and those of other clients. On the wire it follows the items
	// only when set, so a heartbeat without it is the same bytes as
	// before the field existed. With it, a heartbeat costs the same for
	// 10,000 long operations as for one.
	All bool
	// Late is how late the node's heartbeat ticks have run lately (the
	// most, over the last second or two): a saturated node's ticker
	// waits for a core, and its heartbeats come that much further apart
	// than the interval. The client allows for it before it blames the
	// node (see runtime's connWatch). On the wire, in microseconds, after
	// All (then written even when false), only when not zero, and only
	// to a peer of revision 2 or later: an older one would reject the
	// frame.
	Late time.Duration
}

// Result ends an attempt.
type Result struct {
	Call    uint64
	Status  Status
	Code    string // declared error code, empty for undeclared errors and OK
	Message string // the error's text
	Payload []byte // result for OK; error detail otherwise
}

// Cancel tells the server the client no longer wants an attempt.
type Cancel struct {
	Call uint64
}

// Redirect tells the client to send the attempt to another node instead.
type Redirect struct {
	Call uint64
	Node string
	Addr string
	// MayHaveRun says that the redirecting node may have started the
	// attempt's work (a replicated write it proposed before it stopped
	// leading): an attempt that never reaches Node may still have run.
	// Without it the redirecting node ran nothing. It is encoded only
	// when set.
	MayHaveRun bool
}

// Ack tells the client that an attempt arrived, before any heartbeat: the
// attempt was delivered, and the client's heartbeat clock restarts from
// here rather than from its send.
type Ack struct {
	Call uint64
}

// Replica carries one message of the replication protocol between servers
// (runtime/internal/replica/wire.go defines the kinds and their bodies): the
// transport moves it without reading it, so the protocol can grow without
// a frame type per message.
type Replica struct {
	Kind    uint8
	Service string
	Body    []byte
}

func (*Hello) Type() Type     { return TypeHello }
func (*Replica) Type() Type   { return TypeReplica }
func (*Attempt) Type() Type   { return TypeAttempt }
func (*Heartbeat) Type() Type { return TypeHeartbeat }
func (*Result) Type() Type    { return TypeResult }
func (*Cancel) Type() Type    { return TypeCancel }
func (*Redirect) Type() Type  { return TypeRedirect }
func (*Ack) Type() Type       { return TypeAck }

func (f *Hello) appendBody(b []byte) []byte {
	b = append(b, f.Version)
	b = codec.AppendString(b, f.Node)
	b = codec.AppendString(b, f.Group)
	b = codec.AppendUvarint(b, uint64(f.MaxFrame))
	b = codec.AppendUvarint(b, uint64(f.Revision))
	return codec.AppendUvarint(b, f.Caps)
}

func (f *Hello) decodeBody(r *codec.Reader) {
	f.Version = r.Byte()
	f.Node = r.String()
	f.Group = r.String()
	// Each field after the group is absent in the Hello of a peer that
	// predates it.
	if r.Len() > 0 {
		f.MaxFrame = uint32From(r)
	}
	if r.Len() > 0 {
		f.Revision = uint32From(r)
	}
	if r.Len() > 0 {
		f.Caps = r.Uvarint()
	}
	// The Hello alone is read leniently: fields a later revision adds are
	// skipped, so that a node can always tell what its peer speaks.
	r.Fixed(r.Len())
}

func (f *Attempt) appendBody(b []byte) []byte {
	b = codec.AppendUvarint(b, f.Call)
	b = append(b, f.OpID[:]...)
	b = codec.AppendUvarint(b, uint64(f.Number))
	b = codec.AppendVarint(b, int64(f.Timeout))
	b = codec.AppendVarint(b, int64(f.Heartbeat))
	b = codec.AppendString(b, f.Service)
	b = codec.AppendString(b, f.Method)
	b = codec.AppendUvarint(b, uint64(len(f.Entities)))
	for _, e := range f.Entities {
		b = codec.AppendString(b, e)
	}
	b = codec.AppendUvarint(b, uint64(f.Flags))
	b = codec.AppendUvarint(b, uint64(len(f.History)))
	for _, p := range f.History {
		b = codec.AppendString(b, p.Node)
		b = codec.AppendString(b, p.Group)
		b = append(b, p.Reason)
	}
	b = codec.AppendBytes(b, f.Progress)
	b = codec.AppendBytes(b, f.Payload)
	if len(f.Metadata) == 0 {
		return b
	}
	b = codec.AppendUvarint(b, uint64(len(f.Metadata)/2))
	for _, s := range f.Metadata[:len(f.Metadata)&^1] {
		b = codec.AppendString(b, s)
	}
	return b
}

func (f *Attempt) decodeBody(r *codec.Reader) {
	f.Call = r.Uvarint()
	copy(f.OpID[:], r.Fixed(16))
	f.Number = uint32From(r)
	f.Timeout = time.Duration(r.Varint())
	f.Heartbeat = time.Duration(r.Varint())
	f.Service = r.Symbol()
	f.Method = r.Symbol()
	if n := r.Len32(); n > 0 {
		if cap(f.Entities) >= n { // a Decoder's own Attempt
			f.Entities = f.Entities[:n]
		} else {
			f.Entities = make([]string, n)
		}
		for i := range f.Entities {
			f.Entities[i] = r.String()
		}
	} else {
		f.Entities = nil
	}
	f.Flags = AttemptFlags(uint32From(r))
	// A Prior takes at least three bytes, so Len32 bounds this allocation too.
	if n := r.Len32(); n > 0 {
		f.History = make([]Prior, n)
		for i := range f.History {
			f.History[i] = Prior{Node: r.String(), Group: r.String(), Reason: r.Byte()}
		}
	} else {
		f.History = nil
	}
	f.Progress = r.Bytes()
	f.Payload = r.Bytes()
	f.Metadata = nil
	if r.Len() > 0 { // absent when the call has none
		// A pair takes at least two bytes, so Len32 bounds the allocation.
		n := r.Len32()
		if n == 0 || 2*n > r.Len() {
			r.Fail(fmt.Errorf("%d metadata pairs in %d bytes", n, r.Len()))
			return
		}
		f.Metadata = make([]string, 2*n)
		for i := range f.Metadata {
			f.Metadata[i] = r.String()
		}
	}
}

func (f *Heartbeat) appendBody(b []byte) []byte {
	b = codec.AppendUvarint(b, uint64(len(f.Items)))
	for _, it := range f.Items {
		b = codec.AppendUvarint(b, it.Call)
		b = codec.AppendBytes(b, it.Progress)
	}
	if f.All || f.Late > 0 {
		b = codec.AppendBool(b, f.All)
	}
	if us := f.Late.Microseconds(); us > 0 {
		b = codec.AppendUvarint(b, uint64(us))
	}
	return b
}

// decodeBody reuses f.Items' backing array, so a Decoder that keeps one
// Heartbeat decodes heartbeats without allocating.
func (f *Heartbeat) decodeBody(r *codec.Reader) {
	n := r.Len32()
	if cap(f.Items) >= n {
		f.Items = f.Items[:n]
	} else {
		f.Items = make([]HeartbeatItem, n)
	}
	for i := range f.Items {
		f.Items[i] = HeartbeatItem{Call: r.Uvarint(), Progress: r.Bytes()}
	}
	f.All, f.Late = false, 0
	if r.Len() > 0 { // absent unless set
		f.All = r.Bool()
	}
	if r.Len() > 0 { // absent unless set, revision 2
		f.Late = time.Duration(min(r.Uvarint(), uint64(time.Hour/time.Microsecond))) * time.Microsecond
	}
}

func (f *Result) appendBody(b []byte) []byte {
	b = codec.AppendUvarint(b, f.Call)
	b = append(b, byte(f.Status))
	b = codec.AppendString(b, f.Code)
	b = codec.AppendString(b, f.Message)
	return codec.AppendBytes(b, f.Payload)
}

func (f *Result) decodeBody(r *codec.Reader) {
	f.Call = r.Uvarint()
	f.Status = Status(r.Byte())
	if f.Status > StatusFailover {
		r.Fail(fmt.Errorf("unknown result status %d", f.Status))
	}
	f.Code = r.Symbol()
	f.Message = r.String()
	f.Payload = r.Bytes()
}

func (f *Cancel) appendBody(b []byte) []byte { return codec.AppendUvarint(b, f.Call) }

func (f *Cancel) decodeBody(r *codec.Reader) { f.Call = r.Uvarint() }

func (f *Ack) appendBody(b []byte) []byte { return codec.AppendUvarint(b, f.Call) }

func (f *Ack) decodeBody(r *codec.Reader) { f.Call = r.Uvarint() }

func (f *Redirect) appendBody(b []byte) []byte {
	b = codec.AppendUvarint(b, f.Call)
	b = codec.AppendString(b, f.Node)
	b = codec.AppendString(b, f.Addr)
	if f.MayHaveRun {
		b = codec.AppendUvarint(b, 1)
	}
	return b
}

func (f *Redirect) decodeBody(r *codec.Reader) {
	f.Call = r.Uvarint()
	f.Node = r.String()
	f.Addr = r.String()
	if r.Len() > 0 {
		f.MayHaveRun = r.Uvarint() != 0
	}
}

func (f *Replica) appendBody(b []byte) []byte {
	b = append(b, f.Kind)
	b = codec.AppendString(b, f.Service)
	return codec.AppendBytes(b, f.Body)
}

func (f *Replica) decodeBody(r *codec.Reader) {
	f.Kind = r.Byte()
	f.Service = r.Symbol()
	f.Body = r.Bytes()
}

func uint32From(r *codec.Reader) uint32 {
	v := r.Uvarint()
	if v > 1<<32-1 {
		r.Fail(fmt.Errorf("value %d overflows uint32", v))
		return 0
	}
	return uint32(v)
}

// Append appends f with its header to b. It fails with ErrTooLarge,
// leaving b as it was, if the frame would exceed max bytes (0 means
// DefaultMaxSize).
func Append(b []byte, f Frame, max int) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxSize
	}
	start := len(b)
	b = append(b, 0, 0, 0, 0, Version, byte(f.Type()))
	b = f.appendBody(b)
	n := len(b) - start - 4
	if n > max {
		return b[:start], fmt.Errorf("%w: %s frame of %d bytes, limit %d", ErrTooLarge, f.Type(), n, max)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// Len reads the length prefix at the start of hdr (at least 4 bytes) and
// checks it against max before anyone allocates for the frame.
func Len(hdr []byte, max int) (int, error) {
	if max <= 0 {
		max = DefaultMaxSize
	}
	n := binary.BigEndian.Uint32(hdr)
	if n < 2 {
		return 0, fmt.Errorf("%w: length %d is shorter than a frame header", ErrMalformed, n)
	}
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("%w: length prefix says %d bytes, limit %d", ErrTooLarge, n, max)
	}
	return int(n), nil
}

// Decoder decodes frames. It keeps one Heartbeat whose item slice it reuses,
// one Ack, and one Attempt and one Result, the frames of every call, so
// heartbeats and acks decode without allocating; the *Heartbeat, *Ack,
// *Attempt or *Result it returns is valid until the next Decode. Byte
// slices in decoded frames alias the input. A Decoder is not safe for
// concurrent use.
type Decoder struct {
	hb      Heartbeat
	ack     Ack
	at      Attempt
	res     Result
	r       codec.Reader
	symbols map[string]string // service, method and error-code names seen on this connection
}

// Decode decodes one frame from p: the version byte, the type byte and the
// body, without the length prefix.
func (d *Decoder) Decode(p []byte) (Frame, error) {
	if len(p) < 2 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a frame header", ErrMalformed, len(p))
	}
	if p[0] != Version {
		return nil, fmt.Errorf("%w: frame version %d, this node speaks %d", ErrBadVersion, p[0], Version)
	}
	var f Frame
	switch t := Type(p[1]); t {
	case TypeHello:
		f = new(Hello)
	case TypeAttempt:
		d.at = Attempt{Entities: d.at.Entities[:0]}
		f = &d.at
	case TypeHeartbeat:
		f = &d.hb
	case TypeResult:
		d.res = Result{}
		f = &d.res
	case TypeCancel:
		f = new(Cancel)
	case TypeRedirect:
		f = new(Redirect)
	case TypeReplica:
		f = new(Replica)
	case TypeAck:
		f = &d.ack
	default:
		return nil, fmt.Errorf("%w: %d", ErrUnknownType, p[1])
	}
	if d.symbols == nil {
		d.symbols = make(map[string]string)
		d.r.UseSymbols(d.symbols)
	}
	d.r.Reset(p[2:])
	f.decodeBody(&d.r)
	if err := d.r.Done(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, f.Type(), err)
	}
	return f, nil
}

// Decode decodes one frame with a fresh Decoder; see Decoder.Decode.
func Decode(p []byte) (Frame, error) {
	return new(Decoder).Decode(p)
}
