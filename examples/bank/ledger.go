package bank

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ffgen/ffgen/runtime"
)

// DefaultRemember is how many operation IDs a Ledger remembers by default.
const DefaultRemember = 1 << 17

// Ledger is an in-memory Accounts for one node. The server runs one
// operation per account at a time, in arrival order; the ledger adds
// idempotency: a write it has executed under an operation ID is answered
// from memory when the same operation arrives again (a failover back to
// this node, a late duplicate), so no write is ever applied twice. The
// server remembers results too, for a while; the ledger's memory is bounded
// by count only and outlives the server's. It is safe for concurrent use.
type Ledger struct {
	busy atomic.Bool
	opID func(context.Context) ([16]byte, bool) // the idempotency key of a call

	// mu guards the following. Writes hold it; reads and snapshots
	// share it, so that a snapshot, which a replica takes on the
	// goroutine that applies writes, holds up no read.
	mu       sync.RWMutex
	accounts map[string]*account
	memory   idRing[remembered] // the outcomes of the newest writes
	names    accountNames       // the account IDs remembered outcomes name
	journal  *journal
	applied  uint64
	rejected uint64
	replayed uint64
}

type account struct {
	balance int64
	closed  bool
}

// remembered is the answer to a write, kept to answer it again: its account
// by index into the ledger's names, its error by code (errorCodes), so that
// it holds no pointer.
type remembered struct {
	account int32
	code    uint8
	amount  int64
}

var _ Accounts = (*Ledger)(nil)

// NewLedger returns an empty ledger that remembers the outcomes of the
// last remember writes (DefaultRemember if remember <= 0).
func NewLedger(remember int, opts ...LedgerOption) *Ledger {
	if remember <= 0 {
		remember = DefaultRemember
	}
	o := ledgerOptions{journal: DefaultJournal}
	for _, opt := range opts {
		opt(&o)
	}
	return &Ledger{
		opID:     attemptOpID,
		accounts: make(map[string]*account),
		memory:   newIDRing[remembered](remember),
		names:    newAccountNames(),
		journal:  newJournal(o.journal),
	}
}

// LedgerOption configures NewLedger.
type LedgerOption func(*ledgerOptions)

type ledgerOptions struct{ journal int }

// WithJournal sets how many executed writes the ledger journals for audits
// (DefaultJournal if not given; 0 turns the journal off). See Journal.
func WithJournal(capacity int) LedgerOption {
	return func(o *ledgerOptions) { o.journal = max(capacity, 0) }
}

// SetBusy makes reads fail with ErrLedgerBusy while busy is true, so that
// clients fail over to another group: for a node that is draining.
// Replicated writes ignore it: every replica must apply every write with
// the same result, so their handlers depend on the ledger's state alone.
func (l *Ledger) SetBusy(busy bool) { l.busy.Store(busy) }

// attemptOpID returns the ID of the operation whose handler runs with ctx.
func attemptOpID(ctx context.Context) ([16]byte, bool) {
	if a := runtime.AttemptFrom(ctx); a != nil {
		return a.OpID, true
	}
	return [16]byte{}, false
}

// write runs apply under the ledger's lock, exactly once per operation ID.
// Calls outside a handler (no operation ID) are never deduplicated.
func (l *Ledger) write(ctx context.Context, apply func() (Balance, error)) (Balance, error) {
	id, keyed := l.opID(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if keyed {
		if o, ok := l.memory.get(id); ok {
			l.replayed++
			return Balance{AccountID: l.names.list[o.account], Amount: o.amount}, errorOf(o.code)
		}
	}
	bal, err := apply()
	if err != nil {
		l.rejected++
	} else {
		l.applied++
	}
	if keyed {
		l.memory.put(id, remembered{account: l.names.index(bal.AccountID), code: codeOf(err), amount: bal.Amount})
		l.journal.record(id, bal, err)
	}
	return bal, err
}

// accountNames numbers the account IDs that remembered outcomes name, so
// that an outcome holds an index, not a string.
type accountNames struct {
	list []string
	at   map[string]int32 // where each is in list
}

func newAccountNames() accountNames {
	return accountNames{list: []string{""}, at: map[string]int32{"": 0}}
}

// index returns id's number, giving it the next if it has none.
func (n *accountNames) index(id string) int32 {
	i, ok := n.at[id]
	if !ok {
		i = int32(len(n.list))
		n.list = append(n.list, id)
		n.at[id] = i
	}
	return i
}

// open returns the open account id, or the error saying why not. Called
// with mu held.
func (l *Ledger) open(id string) (*account, error) {
	acc := l.accounts[id]
	switch {
	case acc == nil:
		return nil, ErrUnknownAccount
	case acc.closed:
		return nil, ErrAccountClosed
	}
	return acc, nil
}

// Open implements Accounts.
func (l *Ledger) Open(ctx context.Context, req OpenRequest) (Balance, error) {
	return l.write(ctx, func() (Balance, error) {
		if req.AccountID == "" || req.Initial < 0 {
			return Balance{}, ErrInvalidRequest
		}
		if acc := l.accounts[req.AccountID]; acc != nil {
			if acc.closed {
				return Balance{}, ErrAccountClosed
			}
			return Balance{}, ErrAccountExists
		}
		l.accounts[req.AccountID] = &account{balance: int64(req.Initial)}
		return Balance{AccountID: req.AccountID, Amount: int64(req.Initial)}, nil
	})
}

// Deposit implements Accounts.
func (l *Ledger) Deposit(ctx context.Context, req DepositRequest) (Balance, error) {
	return l.adjust(ctx, req.AccountID, req.Amount, true)
}

// Withdraw implements Accounts.
func (l *Ledger) Withdraw(ctx context.Context, req WithdrawRequest) (Balance, error) {
	return l.adjust(ctx, req.AccountID, req.Amount, false)
}

// adjust credits amount to the open account id, or debits it; amount must
// be positive, and the balance may neither overflow nor go negative.
func (l *Ledger) adjust(ctx context.Context, id string, amount int64, credit bool) (Balance, error) {
	return l.write(ctx, func() (Balance, error) {
		if amount <= 0 {
			return Balance{}, ErrInvalidRequest
		}
		acc, err := l.open(id)
		if err != nil {
			return Balance{}, err
		}
		switch {
		case credit && acc.balance > math.MaxInt64-amount:
			return Balance{}, ErrInvalidRequest
		case credit:
			acc.balance += amount
		case acc.balance < amount:
			return Balance{}, ErrInsufficientFunds
		default:
			acc.balance -= amount
		}
		return Balance{AccountID: id, Amount: acc.balance}, nil
	})
}

// Transfer implements Accounts.
func (l *Ledger) Transfer(ctx context.Context, req TransferRequest) (Balance, error) {
	return l.write(ctx, func() (Balance, error) {
		if req.Amount <= 0 || req.From == req.To {
			return Balance{}, ErrInvalidRequest
		}
		from, err := l.open(req.From)
		if err != nil {
			return Balance{}, err
		}
		to, err := l.open(req.To)
		if err != nil {
			return Balance{}, err
		}
		if from.balance < req.Amount {
			return Balance{}, ErrInsufficientFunds
		}
		if to.balance > math.MaxInt64-req.Amount {
			return Balance{}, ErrInvalidRequest
		}
		from.balance -= req.Amount
		to.balance += req.Amount
		return Balance{AccountID: req.From, Amount: from.balance}, nil
	})
}

// Balance implements Accounts. A closed account reports its last balance.
func (l *Ledger) Balance(ctx context.Context, id string) (Balance, error) {
	if l.busy.Load() {
		return Balance{}, ErrLedgerBusy
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	acc := l.accounts[id]
	if acc == nil {
		return Balance{}, ErrUnknownAccount
	}
	return Balance{AccountID: id, Amount: acc.balance}, nil
}

// Close implements Accounts.
func (l *Ledger) Close(ctx context.Context, id string) error {
	if l.busy.Load() {
		return ErrLedgerBusy // not replicated: it may fail over
	}
	_, err := l.write(ctx, func() (Balance, error) {
		acc, err := l.open(id)
		if err != nil {
			return Balance{}, err
		}
		if acc.balance != 0 {
			return Balance{}, ErrBalanceNotZero
		}
		acc.closed = true
		return Balance{AccountID: id}, nil
	})
	return err
}

// Snapshot is a consistent view of a ledger, for audits.
type Snapshot struct {
	Balances map[string]int64 `json:"balances"`         // every account, closed ones too
	Closed   []string         `json:"closed,omitempty"` // sorted
	Applied  uint64           `json:"applied"`          // writes that changed the ledger
	Rejected uint64           `json:"rejected"`         // writes answered with an error
	Replayed uint64           `json:"replayed"`         // repeated operations answered from memory
}

// Snapshot returns the accounts whose ID starts with prefix ("" for all)
// and the ledger's counters, all taken at one instant.
func (l *Ledger) Snapshot(prefix string) Snapshot {
	l.mu.RLock()
	defer l.mu.RUnlock()
	s := Snapshot{
		Balances: make(map[string]int64),
		Applied:  l.applied,
		Rejected: l.rejected,
		Replayed: l.replayed,
	}
	for id, acc := range l.accounts {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		s.Balances[id] = acc.balance
		if acc.closed {
			s.Closed = append(s.Closed, id)
		}
	}
	slices.Sort(s.Closed)
	return s
}
