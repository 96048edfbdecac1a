package runtime_test

// A replicated counter service for the replication tests, and the history
// of its client operations checked with porcupine, as Jepsen checks a
// database: every Add (a replicated write that returns the new value) and
// every Get, with when it was invoked and when it returned, and whether it
// succeeded, failed for sure, or may have applied.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
)

// counter is one node's replica of the counter service.
type counter struct {
	node string
	mu   sync.Mutex
	vals map[string]int64
	runs map[[16]byte]int // how many times each write ran here
	gets int              // reads run here
	// hook, if set, runs first in Add: to fail, panic or block.
	hook func(ctx context.Context, key string) error
	// getHook, if set, runs first in Get.
	getHook func(ctx context.Context, key string) error
}

func newCounter(node string) *counter {
	return &counter{node: node, vals: map[string]int64{}, runs: map[[16]byte]int{}}
}

func (c *counter) Add(ctx context.Context, key string, delta int64) (int64, error) {
	c.mu.Lock()
	hook := c.hook
	c.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, key); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[runtime.AttemptFrom(ctx).OpID]++
	c.vals[key] += delta
	return c.vals[key], nil
}

func (c *counter) Get(ctx context.Context, key string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.getHook != nil {
		if err := c.getHook(ctx, key); err != nil {
			return 0, err
		}
	}
	c.gets++
	return c.vals[key], nil
}

func (c *counter) setHook(h func(ctx context.Context, key string) error) {
	c.mu.Lock()
	c.hook = h
	c.mu.Unlock()
}

func (c *counter) setGetHook(h func(ctx context.Context, key string) error) {
	c.mu.Lock()
	c.getHook = h
	c.mu.Unlock()
}

func (c *counter) reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

func (c *counter) state() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.vals)
}

// twice lists the writes that ran more than once here.
func (c *counter) twice() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, n := range c.runs {
		if n > 1 {
			out = append(out, fmt.Sprintf("%x ran %d times", id[:4], n))
		}
	}
	return out
}

// snapCounter is a counter that implements runtime.StateTransfer.
type snapCounter struct{ *counter }

func (c snapCounter) SnapshotState() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return json.Marshal(c.vals)
}

func (c snapCounter) RestoreState(b []byte) error {
	vals := map[string]int64{}
	if err := json.Unmarshal(b, &vals); err != nil {
		return err
	}
	c.mu.Lock()
	c.vals = vals
	c.mu.Unlock()
	return nil
}

var errCounterBusy = errors.New("counter busy") // declared with the failover directive

func counterMethod(name string, mode runtime.Mode, linearizable bool) *runtime.MethodDesc {
	m := &runtime.MethodDesc{Service: "test.Counter", Name: name, Mode: mode, Linearizable: linearizable,
		Errors: []runtime.ErrorRule{{
			Code: "ErrCounterBusy", Directive: runtime.Failover,
			Match:  func(err error) bool { return errors.Is(err, errCounterBusy) },
			Decode: func(string, []byte) error { return errCounterBusy },
		}}}
	m.Entities = func(args codec.Message, dst []string) []string {
		return append(dst, args.(*testledger.AddArgs).Account)
	}
	m.NewArgs = func() codec.Message { return new(testledger.AddArgs) }
	m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
		a := args.(*testledger.AddArgs)
		var c *counter
		switch x := impl.(type) {
		case *counter:
			c = x
		case snapCounter:
			c = x.counter
		}
		var v int64
		var err error
		if name == "Add" {
			v, err = c.Add(ctx, a.Account, a.Amount)
		} else {
			v, err = c.Get(ctx, a.Account)
		}
		return &testledger.Int64Result{R0: v}, err
	}
	return m
}

var (
	counterAdd     = counterMethod("Add", runtime.ModeScatter, false)
	counterGet     = counterMethod("Get", runtime.ModeFailover, false)
	counterReadNow = counterMethod("ReadNow", runtime.ModeFailover, true)
	counterDesc    = &runtime.ServiceDesc{Name: "test.Counter", Methods: []*runtime.MethodDesc{counterAdd, counterGet, counterReadNow}}
)

// replEnv is a cluster serving the counter, and the history of every call
// made through it.
type replEnv struct {
	*fftest.Cluster
	counters map[string]*counter
	client   *runtime.Client
	hist     history
	nclients int
}

// newClient makes a client of the cluster, keeping count of their names
// (fftest names them client1, client2, …).
func (e *replEnv) newClient(t *testing.T, modify ...func(*runtime.ClientConfig)) *runtime.Client {
	t.Helper()
	e.nclients++
	return e.Client(t, modify...)
}

// lastClient is the network name of the client made last.
func (e *replEnv) lastClient() string { return fmt.Sprintf("client%d", e.nclients) }

// newReplEnv serves the counter on a cluster; snapshots makes it a
// StateTransfer.
func newReplEnv(t *testing.T, cfg fftest.Config, snapshots bool) *replEnv {
	t.Helper()
	e := &replEnv{Cluster: fftest.New(t, cfg), counters: map[string]*counter{}}
	e.Serve(t, counterDesc, func(n *fftest.Node) any {
		c := newCounter(n.Name)
		e.counters[n.Name] = c
		if snapshots {
			return snapCounter{c}
		}
		return c
	})
	e.client = e.newClient(t)
	return e
}

// call invokes m and records it in the history.
func (e *replEnv) call(ctx context.Context, c *runtime.Client, m *runtime.MethodDesc, key string, delta int64) (int64, error) {
	op := e.hist.begin(ctx, m.Name, key, delta)
	var res testledger.Int64Result
	err := c.Invoke(ctx, m, &testledger.AddArgs{Account: key, Amount: delta}, &res)
	e.hist.end(op, res.R0, err)
	return res.R0, err
}

func (e *replEnv) add(ctx context.Context, key string, delta int64) (int64, error) {
	return e.call(ctx, e.client, counterAdd, key, delta)
}

// check asserts what every replication test must end with: the replicas
// that serve hold the same state, no write ran twice anywhere, and the
// history is linearizable.
func (e *replEnv) check(t *testing.T, nodes ...string) {
	t.Helper()
	if len(nodes) == 0 {
		for _, n := range e.Nodes {
			nodes = append(nodes, n.Name)
		}
	}
	e.WaitConverged(t, nodes...)
	want := e.counters[nodes[0]].state()
	for _, name := range nodes {
		c := e.counters[name]
		if got := c.state(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("replica %s holds %v, %s holds %v", name, got, nodes[0], want)
		}
		if tw := c.twice(); len(tw) > 0 {
			t.Errorf("replica %s applied writes twice: %v", name, tw)
		}
	}
	e.hist.check(t)
}

// history records client operations for porcupine.
type history struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	ids int
}

type counterIn struct {
	kind  string // "Add", "Get", "ReadNow"
	key   string
	delta int64
	id    byte // an Add's operation ID chosen by the test (opCtx), 0 for a new one
}

type counterOut struct {
	value   int64
	unknown bool // the call failed and may have applied: its value is unknown
	failed  bool // the call failed and did not apply
}

func (h *history) begin(ctx context.Context, kind, key string, delta int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	in := counterIn{kind: kind, key: key, delta: delta}
	if id, ok := ctx.Value(testOpID{}).(byte); ok {
		in.id = id
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: h.ids, Input: in, Call: time.Now().UnixNano()})
	h.ids++
	return len(h.ops) - 1
}

func (h *history) end(i int, v int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op := &h.ops[i]
	op.Return = time.Now().UnixNano()
	switch {
	case err == nil:
		op.Output = counterOut{value: v}
	case runtime.MaybeExecuted(err):
		// It may have applied, at any time after its call: it stays
		// open until the end of the history.
		op.Output = counterOut{unknown: true}
		op.Return = math.MaxInt64
	default:
		op.Output = counterOut{failed: true}
	}
}

// outcomes counts the operations answered, those that may have applied,
// and those that failed for sure.
func (h *history) outcomes() (ok, unsure, failed int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		switch out, _ := op.Output.(counterOut); {
		case out.unknown:
			unsure++
		case out.failed:
			failed++
		default:
			ok++
		}
	}
	return ok, unsure, failed
}

// counterModel: each key is a register changed by Add, which returns the
// new value, and read by Get and ReadNow. Get is a default read, which may
// be stale: only the linearizable ReadNow is held to the model's current
// value.
var counterModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(counterIn).key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return counterState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(counterState), input.(counterIn), output.(counterOut)
		switch {
		case out.failed:
			return true, st // did not apply
		case in.kind == "Add" && in.id != 0:
			// A write retried with its operation ID applies once; every
			// later call of it answers the first one's result.
			if v, ok := st.recorded(in.id); ok {
				return out.unknown || out.value == v, st
			}
			next := counterState{v: st.v + in.delta, rec: st.rec + fmt.Sprintf("%d=%d;", in.id, st.v+in.delta)}
			return out.unknown || out.value == next.v, next
		case in.kind == "Add":
			return out.unknown || out.value == st.v+in.delta, counterState{v: st.v + in.delta, rec: st.rec}
		case in.kind == "ReadNow":
			return out.unknown || out.value == st.v, st
		}
		return true, st // a default read may be stale
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(counterIn), output.(counterOut)
		return fmt.Sprintf("%s(%s,%d) -> %+v", in.kind, in.key, in.delta, out)
	},
}

// testOpID keys the operation ID a test chose (opCtx) in a context.
type testOpID struct{}

// counterState is one key's value, and the results of the writes retried
// with a chosen operation ID ("id=value;"), comparable as porcupine needs.
type counterState struct {
	v   int64
	rec string
}

func (s counterState) recorded(id byte) (int64, bool) {
	for _, f := range strings.Split(s.rec, ";") {
		var i, v int64
		if _, err := fmt.Sscanf(f, "%d=%d", &i, &v); err == nil && i == int64(id) {
			return v, true
		}
	}
	return 0, false
}

// check fails t unless the history is linearizable. A history porcupine
// cannot decide within a minute of real time fails too.
func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	for _, op := range ops {
		if op.Output == nil {
			t.Fatalf("operation %+v never returned", op.Input)
		}
	}
	res, info := checkOutsideBubble(ops)
	if res != porcupine.Ok {
		var b []byte
		for _, part := range info.PartialLinearizations() {
			b = fmt.Appendf(b, "%v\n", part)
		}
		t.Fatalf("history of %d operations is not linearizable (%s); longest linearizable prefixes:\n%s", len(ops), res, b)
	}
}

// Porcupine runs on a goroutine outside any synctest bubble. Inside one its
// time limit would be the bubble's clock, which stands still while the
// search keeps every goroutine busy: a history it cannot decide would hang
// the test instead of failing it. The channels are made outside bubbles
// too, as a bubble's goroutines may use those but no other goroutine may
// use a bubble's.
var (
	checkMu       sync.Mutex
	checkRequests = make(chan []porcupine.Operation)
	checkResults  = make(chan checkResult)
)

type checkResult struct {
	res  porcupine.CheckResult
	info porcupine.LinearizationInfo
}

func init() {
	go func() {
		for ops := range checkRequests {
			res, info := porcupine.CheckOperationsVerbose(counterModel, ops, time.Minute)
			checkResults <- checkResult{res, info}
		}
	}()
}

func checkOutsideBubble(ops []porcupine.Operation) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	checkMu.Lock()
	defer checkMu.Unlock()
	checkRequests <- ops
	r := <-checkResults
	return r.res, r.info
}
