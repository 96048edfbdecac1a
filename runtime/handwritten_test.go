package runtime_test

// A hand-written service in the shape ffgen generates, proving the runtime
// API before the generator uses it: a descriptor of plain data, one Invoke
// call per client method, one Register call for the server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
)

// Ledger is the service as its author would write it.
type Ledger interface {
	Add(ctx context.Context, account string, amount int64) (int64, error)
	Transfer(ctx context.Context, from, to string, amount int64) (int64, error)
	Close(ctx context.Context, account string) error
}

var (
	ErrRejected = errors.New("rejected")    // Fail
	ErrBusy     = errors.New("ledger busy") // Failover
)

// LimitError is a declared error type (errors.As across the wire).
type LimitError struct{ Limit int64 }

func (e *LimitError) Error() string { return "over limit " + strconv.FormatInt(e.Limit, 10) }

// --- what ffgen would generate -------------------------------------------

type ledgerAddArgs struct {
	Account string
	Amount  int64
}

func (a *ledgerAddArgs) AppendFF(b []byte) []byte {
	b = codec.AppendString(b, a.Account)
	return codec.AppendVarint(b, a.Amount)
}

func (a *ledgerAddArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.Account = r.String()
	a.Amount = r.Varint()
	return r.Done()
}

type ledgerTransferArgs struct {
	From, To string
	Amount   int64
}

func (a *ledgerTransferArgs) AppendFF(b []byte) []byte {
	b = codec.AppendString(b, a.From)
	b = codec.AppendString(b, a.To)
	return codec.AppendVarint(b, a.Amount)
}

func (a *ledgerTransferArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.From = r.String()
	a.To = r.String()
	a.Amount = r.Varint()
	return r.Done()
}

type ledgerCloseArgs struct{ Account string }

func (a *ledgerCloseArgs) AppendFF(b []byte) []byte { return codec.AppendString(b, a.Account) }

func (a *ledgerCloseArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.Account = r.String()
	return r.Done()
}

type ledgerInt64Result struct{ R0 int64 }

func (x *ledgerInt64Result) AppendFF(b []byte) []byte { return codec.AppendVarint(b, x.R0) }

func (x *ledgerInt64Result) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	x.R0 = r.Varint()
	return r.Done()
}

type ledgerEmptyResult struct{}

func (*ledgerEmptyResult) AppendFF(b []byte) []byte { return b }

func (*ledgerEmptyResult) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	return r.Done()
}

var ledgerErrors = []runtime.ErrorRule{
	{
		Code: "ErrRejected", Directive: runtime.Fail,
		Match:  func(err error) bool { return errors.Is(err, ErrRejected) },
		Decode: func(string, []byte) error { return ErrRejected },
	},
	{
		Code: "ErrBusy", Directive: runtime.Failover,
		Match:  func(err error) bool { return errors.Is(err, ErrBusy) },
		Decode: func(string, []byte) error { return ErrBusy },
	},
	{
		Code: "*LimitError", Directive: runtime.Fail,
		Match: func(err error) bool { var t *LimitError; return errors.As(err, &t) },
		Encode: func(err error) []byte {
			var t *LimitError
			errors.As(err, &t)
			return codec.AppendVarint(nil, t.Limit)
		},
		Decode: func(_ string, detail []byte) error {
			r := codec.NewReader(detail)
			t := &LimitError{Limit: r.Varint()}
			if r.Done() != nil {
				return fmt.Errorf("bad *LimitError detail")
			}
			return t
		},
	},
}

func ledgerMethod(name string, mode runtime.Mode) *runtime.MethodDesc {
	return &runtime.MethodDesc{Service: "test.Ledger", Name: name, Mode: mode, Errors: ledgerErrors}
}

var (
	ledgerAdd = func() *runtime.MethodDesc {
		m := ledgerMethod("Add", runtime.ModeFailover)
		m.Entities = func(args codec.Message, dst []string) []string {
			return append(dst, args.(*ledgerAddArgs).Account)
		}
		m.NewArgs = func() codec.Message { return new(ledgerAddArgs) }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*ledgerAddArgs)
			r0, err := impl.(Ledger).Add(ctx, a.Account, a.Amount)
			return &ledgerInt64Result{R0: r0}, err
		}
		return m
	}()
	ledgerTransfer = func() *runtime.MethodDesc {
		m := ledgerMethod("Transfer", runtime.ModeScatter)
		m.Entities = func(args codec.Message, dst []string) []string {
			a := args.(*ledgerTransferArgs)
			return append(dst, a.From, a.To)
		}
		m.NewArgs = func() codec.Message { return new(ledgerTransferArgs) }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*ledgerTransferArgs)
			r0, err := impl.(Ledger).Transfer(ctx, a.From, a.To, a.Amount)
			return &ledgerInt64Result{R0: r0}, err
		}
		return m
	}()
	ledgerClose = func() *runtime.MethodDesc {
		m := ledgerMethod("Close", runtime.ModeFailover)
		m.Hold = true
		m.Entities = func(args codec.Message, dst []string) []string {
			return append(dst, args.(*ledgerCloseArgs).Account)
		}
		m.NewArgs = func() codec.Message { return new(ledgerCloseArgs) }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*ledgerCloseArgs)
			return &ledgerEmptyResult{}, impl.(Ledger).Close(ctx, a.Account)
		}
		return m
	}()
	ledgerDesc = &runtime.ServiceDesc{Name: "test.Ledger", Methods: []*runtime.MethodDesc{ledgerAdd, ledgerTransfer, ledgerClose}}
	// plainLedgerDesc is the ledger served without replication: its
	// Transfer runs on the node it reaches, as a failover method does.
	plainLedgerDesc = &runtime.ServiceDesc{Name: "test.Ledger", Methods: []*runtime.MethodDesc{ledgerAdd, func() *runtime.MethodDesc {
		m := *ledgerTransfer
		m.Mode = runtime.ModeFailover
		return &m
	}(), ledgerClose}}
)

// ledgerClient is the generated typed client.
type ledgerClient struct {
	c    *runtime.Client
	add  *runtime.MethodDesc // lets a test swap the mode or settings
	xfer *runtime.MethodDesc
}

var _ Ledger = (*ledgerClient)(nil)

func newLedgerClient(c *runtime.Client) *ledgerClient {
	return &ledgerClient{c: c, add: ledgerAdd, xfer: ledgerTransfer}
}

func (x *ledgerClient) Add(ctx context.Context, account string, amount int64) (int64, error) {
	var res ledgerInt64Result
	err := x.c.Invoke(ctx, x.add, &ledgerAddArgs{Account: account, Amount: amount}, &res)
	return res.R0, err
}

func (x *ledgerClient) Transfer(ctx context.Context, from, to string, amount int64) (int64, error) {
	var res ledgerInt64Result
	err := x.c.Invoke(ctx, x.xfer, &ledgerTransferArgs{From: from, To: to, Amount: amount}, &res)
	return res.R0, err
}

func (x *ledgerClient) Close(ctx context.Context, account string) error {
	return x.c.Invoke(ctx, ledgerClose, &ledgerCloseArgs{Account: account}, &ledgerEmptyResult{})
}

// --- a test implementation ---------------------------------------------

// memLedger is one node's ledger. hook, when set, runs inside Add before
// the balance changes and may block, fail or panic.
type memLedger struct {
	node string
	mu   sync.Mutex
	bal  map[string]int64
	log  []string // operations in the order they ran: "add x 5", "close x"
	runs map[string]int
	hook func(ctx context.Context, account string, amount int64) error
	lean bool // benchmarks: no log, no per-operation bookkeeping
	// leanHold, set before the first call when lean, may block an Add.
	leanHold func(account string)
}

func newMemLedger(node string) *memLedger {
	return &memLedger{node: node, bal: map[string]int64{}, runs: map[string]int{}}
}

func (l *memLedger) Add(ctx context.Context, account string, amount int64) (int64, error) {
	if l.lean {
		if l.leanHold != nil {
			l.leanHold(account)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.bal[account] += amount
		return l.bal[account], nil
	}
	l.mu.Lock()
	hook := l.hook
	l.runs[runtime.AttemptFrom(ctx).OpIDString()]++
	l.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, account, amount); err != nil {
			return 0, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bal[account] += amount
	l.log = append(l.log, fmt.Sprintf("add %s %d", account, amount))
	return l.bal[account], nil
}

func (l *memLedger) Transfer(ctx context.Context, from, to string, amount int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bal[from] < amount {
		return 0, &LimitError{Limit: l.bal[from]}
	}
	l.bal[from] -= amount
	l.bal[to] += amount
	l.log = append(l.log, fmt.Sprintf("transfer %s %s %d", from, to, amount))
	return l.bal[from], nil
}

func (l *memLedger) Close(ctx context.Context, account string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, "close "+account)
	return nil
}

// SnapshotState and RestoreState make memLedger a runtime.StateTransfer.
func (l *memLedger) SnapshotState() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return json.Marshal(memState{Bal: l.bal, Log: l.log})
}

func (l *memLedger) RestoreState(state []byte) error {
	var st memState
	if err := json.Unmarshal(state, &st); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bal, l.log = st.Bal, st.Log
	if l.bal == nil {
		l.bal = map[string]int64{}
	}
	return nil
}

type memState struct {
	Bal map[string]int64
	Log []string
}

func (l *memLedger) balances() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.bal))
	for k, v := range l.bal {
		out[k] = v
	}
	return out
}

func (l *memLedger) setHook(h func(ctx context.Context, account string, amount int64) error) {
	l.mu.Lock()
	l.hook = h
	l.mu.Unlock()
}

func (l *memLedger) executions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.runs {
		n += v
	}
	return n
}
