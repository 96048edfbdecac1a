// Package frametest holds frames for tests of the wire format and of what
// carries it: one of every type, and the frames of an earlier release.
package frametest

import (
	"bytes"
	"reflect"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Samples returns one populated frame of every type, plus edge cases.
func Samples() map[string]frame.Frame {
	return map[string]frame.Frame{
		"hello": &frame.Hello{Version: frame.Version, Node: "node-a", Group: "zone-1"},
		"attempt": &frame.Attempt{
			Call:      42,
			OpID:      [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			Number:    1,
			Timeout:   5 * time.Second,
			Heartbeat: 90 * time.Millisecond,
			Service:   "Accounts",
			Method:    "Withdraw",
			Entities:  []string{"acct-1", "acct-2"},
			Flags:     frame.FlagHold | frame.FlagHedge,
			History:   []frame.Prior{{Node: "node-b", Group: "zone-2", Reason: 3}},
			Progress:  []byte("half"),
			Payload:   []byte{0, 1, 2, 255},
		},
		"attempt-minimal": &frame.Attempt{Service: "S", Method: "M", Timeout: -1},
		"attempt-metadata": &frame.Attempt{Service: "S", Method: "M", Payload: []byte{7},
			Metadata: []string{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-user", ""}},
		"heartbeat": &frame.Heartbeat{Items: []frame.HeartbeatItem{
			{Call: 1}, {Call: 1 << 40, Progress: []byte("p")},
		}},
		"heartbeat-empty": &frame.Heartbeat{},
		"heartbeat-all":   &frame.Heartbeat{All: true, Items: []frame.HeartbeatItem{{Call: 5, Progress: []byte("q")}}},
		"result":          &frame.Result{Call: 7, Status: frame.StatusOK, Payload: []byte("ok")},
		"result-fail":     &frame.Result{Call: 8, Status: frame.StatusFail, Code: "ErrInsufficientFunds", Message: "insufficient funds"},
		"result-failover": &frame.Result{Call: 9, Status: frame.StatusFailover, Message: "busy"},
		"cancel":          &frame.Cancel{Call: 1<<64 - 1},
		"redirect":        &frame.Redirect{Call: 3, Node: "node-c", Addr: "10.0.0.3:7000"},
		"redirect-ran":    &frame.Redirect{Call: 4, Node: "node-d", Addr: "10.0.0.4:7000", MayHaveRun: true},
		"ack":             &frame.Ack{Call: 1 << 33},
	}
}

// Opts are the cmp options that compare frames: they treat nil and empty
// slices alike, as the format does, and compare byte slices whole rather
// than element by element.
var Opts = cmp.Options{
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() != reflect.TypeFor[[]byte]() }, cmpopts.EquateEmpty()),
	cmp.Comparer(bytes.Equal),
}

// PreviousRelease holds one frame of each type as the release before
// protocol revisions wrote them (its Hello has no revision and no
// capabilities), in hex with its length prefix: a node of today must keep
// reading them, since a rolling upgrade mixes the two.
var PreviousRelease = []struct {
	Hex   string
	Frame frame.Frame
}{
	{"0000000c010101026131016180808002", &frame.Hello{Version: 1, Node: "a1", Group: "a", MaxFrame: 4 << 20}},
	{"00000050010207010203000000000000000000000000000180d0acf30e80c2d72f0d62616e6b2e4163636f756e74730857697468647261770106616363742d31280102623101620100050a0361626301016b0176",
		&frame.Attempt{Call: 7, OpID: [16]byte{1, 2, 3}, Number: 1, Timeout: 2 * time.Second, Heartbeat: 50 * time.Millisecond,
			Service: "bank.Accounts", Method: "Withdraw", Entities: []string{"acct-1"}, Flags: frame.FlagAck | frame.FlagAllBeat,
			History: []frame.Prior{{Node: "b1", Group: "b", Reason: 1}}, Payload: []byte{10, 3, 'a', 'b', 'c'}, Metadata: []string{"k", "v"}}},
	{"0000000a010301070468616c6601", &frame.Heartbeat{Items: []frame.HeartbeatItem{{Call: 7, Progress: []byte("half")}}, All: true}},
	{"0000002f0104070114457272496e73756666696369656e7446756e647312696e73756666696369656e742066756e6473020801",
		&frame.Result{Call: 7, Status: frame.StatusFail, Code: "ErrInsufficientFunds", Message: "insufficient funds", Payload: []byte{8, 1}}},
	{"00000003010507", &frame.Cancel{Call: 7}},
	{"000000150106070261320e3132372e302e302e313a37303030", &frame.Redirect{Call: 7, Node: "a2", Addr: "127.0.0.1:7000"}},
	{"000000150107100d62616e6b2e4163636f756e747303010203", &frame.Replica{Kind: 16, Service: "bank.Accounts", Body: []byte{1, 2, 3}}},
	{"00000003010807", &frame.Ack{Call: 7}},
}
