// Package testledger is a hand-written service in the shape ffgen
// generates, shared by the tests of the runtime and of the packages that
// test with it: a descriptor of plain data, one Invoke call per client
// method, one Register call for the server; and Mem, one node's ledger in
// memory, which a test can make block, fail or panic. It proves the
// runtime API without the generator, which uses it.
package testledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// The declared errors, with the directive each is declared with.
var (
	ErrRejected = errors.New("rejected")    // Fail
	ErrBusy     = errors.New("ledger busy") // Failover
)

// LimitError is a declared error type (errors.As across the wire).
type LimitError struct{ Limit int64 }

func (e *LimitError) Error() string { return "over limit " + strconv.FormatInt(e.Limit, 10) }

// --- what ffgen would generate -------------------------------------------

// The argument and result messages.

type AddArgs struct {
	Account string
	Amount  int64
}

func (a *AddArgs) AppendFF(b []byte) []byte {
	b = codec.AppendString(b, a.Account)
	return codec.AppendVarint(b, a.Amount)
}

func (a *AddArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.Account = r.String()
	a.Amount = r.Varint()
	return r.Done()
}

type TransferArgs struct {
	From, To string
	Amount   int64
}

func (a *TransferArgs) AppendFF(b []byte) []byte {
	b = codec.AppendString(b, a.From)
	b = codec.AppendString(b, a.To)
	return codec.AppendVarint(b, a.Amount)
}

func (a *TransferArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.From = r.String()
	a.To = r.String()
	a.Amount = r.Varint()
	return r.Done()
}

type CloseArgs struct{ Account string }

func (a *CloseArgs) AppendFF(b []byte) []byte { return codec.AppendString(b, a.Account) }

func (a *CloseArgs) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	a.Account = r.String()
	return r.Done()
}

type Int64Result struct{ R0 int64 }

func (x *Int64Result) AppendFF(b []byte) []byte { return codec.AppendVarint(b, x.R0) }

func (x *Int64Result) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	x.R0 = r.Varint()
	return r.Done()
}

type EmptyResult struct{}

func (*EmptyResult) AppendFF(b []byte) []byte { return b }

func (*EmptyResult) UnmarshalFF(b []byte) error {
	r := codec.NewReader(b)
	return r.Done()
}

var errorRules = []runtime.ErrorRule{
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

func method(name string, mode runtime.Mode) *runtime.MethodDesc {
	return &runtime.MethodDesc{Service: "test.Ledger", Name: name, Mode: mode, Errors: errorRules}
}

// The methods: Add fails over, Transfer is a replicated write, Close
// waits until no operation runs on its account.
var (
	AddMethod = func() *runtime.MethodDesc {
		m := method("Add", runtime.ModeFailover)
		m.Entities = func(args codec.Message, dst []string) []string {
			return append(dst, args.(*AddArgs).Account)
		}
		m.NewArgs = func() codec.Message { return new(AddArgs) }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*AddArgs)
			r0, err := impl.(Ledger).Add(ctx, a.Account, a.Amount)
			return &Int64Result{R0: r0}, err
		}
		return m
	}()
	TransferMethod = func() *runtime.MethodDesc {
		m := method("Transfer", runtime.ModeScatter)
		m.Entities = func(args codec.Message, dst []string) []string {
			a := args.(*TransferArgs)
			return append(dst, a.From, a.To)
		}
		m.NewArgs = func() codec.Message { return new(TransferArgs) }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*TransferArgs)
			r0, err := impl.(Ledger).Transfer(ctx, a.From, a.To, a.Amount)
			return &Int64Result{R0: r0}, err
		}
		return m
	}()
	CloseMethod = func() *runtime.MethodDesc {
		m := method("Close", runtime.ModeFailover)
		m.Hold = true
		m.Entities = func(args codec.Message, dst []string) []string {
			return append(dst, args.(*CloseArgs).Account)
		}
		m.NewArgs = func() codec.Message { return new(CloseArgs) }
		m.Handle = func(ctx context.Context, impl any, args codec.Message) (codec.Message, error) {
			a := args.(*CloseArgs)
			return &EmptyResult{}, impl.(Ledger).Close(ctx, a.Account)
		}
		return m
	}()
	// Desc is the service, replicated for its Transfer.
	Desc = &runtime.ServiceDesc{Name: "test.Ledger", Methods: []*runtime.MethodDesc{AddMethod, TransferMethod, CloseMethod}}
	// PlainDesc is the ledger served without replication: its
	// Transfer runs on the node it reaches, as a failover method does.
	PlainDesc = &runtime.ServiceDesc{Name: "test.Ledger", Methods: []*runtime.MethodDesc{AddMethod, func() *runtime.MethodDesc {
		m := *TransferMethod
		m.Mode = runtime.ModeFailover
		return &m
	}(), CloseMethod}}
)

// Client is the generated typed client. A test may swap the descriptor
// its Add or Transfer calls with, to change the mode or settings.
type Client struct {
	c              *runtime.Client
	AddMethod      *runtime.MethodDesc
	TransferMethod *runtime.MethodDesc
}

var _ Ledger = (*Client)(nil)

// NewClient returns the ledger's client on c.
func NewClient(c *runtime.Client) *Client {
	return &Client{c: c, AddMethod: AddMethod, TransferMethod: TransferMethod}
}

func (x *Client) Add(ctx context.Context, account string, amount int64) (int64, error) {
	var res Int64Result
	err := x.c.Invoke(ctx, x.AddMethod, &AddArgs{Account: account, Amount: amount}, &res)
	return res.R0, err
}

func (x *Client) Transfer(ctx context.Context, from, to string, amount int64) (int64, error) {
	var res Int64Result
	err := x.c.Invoke(ctx, x.TransferMethod, &TransferArgs{From: from, To: to, Amount: amount}, &res)
	return res.R0, err
}

func (x *Client) Close(ctx context.Context, account string) error {
	return x.c.Invoke(ctx, CloseMethod, &CloseArgs{Account: account}, &EmptyResult{})
}

// --- a test implementation ---------------------------------------------

// Mem is one node's ledger. Its hook (SetHook), when set, runs inside
// Add before the balance changes and may block, fail or panic.
type Mem struct {
	// Lean, for benchmarks, keeps no log and no per-operation
	// bookkeeping; LeanHold, set with it before the first call, may
	// block an Add.
	Lean     bool
	LeanHold func(account string)

	node string
	mu   sync.Mutex // guards the following
	bal  map[string]int64
	log  []string // operations in the order they ran: "add x 5", "close x"
	runs map[string]int
	hook func(ctx context.Context, account string, amount int64) error
}

// NewMem returns node's empty ledger.
func NewMem(node string) *Mem {
	return &Mem{node: node, bal: map[string]int64{}, runs: map[string]int{}}
}

func (l *Mem) Add(ctx context.Context, account string, amount int64) (int64, error) {
	if l.Lean {
		if l.LeanHold != nil {
			l.LeanHold(account)
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

func (l *Mem) Transfer(ctx context.Context, from, to string, amount int64) (int64, error) {
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

func (l *Mem) Close(ctx context.Context, account string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, "close "+account)
	return nil
}

// SnapshotState and RestoreState make Mem a runtime.StateTransfer.
func (l *Mem) SnapshotState() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return json.Marshal(memState{Bal: l.bal, Log: l.log})
}

func (l *Mem) RestoreState(state []byte) error {
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

// Balances returns a copy of every account's balance.
func (l *Mem) Balances() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.bal)
}

// SetHook sets the hook Add runs first; nil removes it.
func (l *Mem) SetHook(h func(ctx context.Context, account string, amount int64) error) {
	l.mu.Lock()
	l.hook = h
	l.mu.Unlock()
}

// Executions is how many times Add ran here, counting each run of an
// operation.
func (l *Mem) Executions() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.runs {
		n += v
	}
	return n
}

// Log returns the operations in the order they ran: "add x 5",
// "transfer x y 5", "close x".
func (l *Mem) Log() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}
