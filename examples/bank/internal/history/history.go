// Package history records what the clients of a bank cluster did and were
// told, one operation per line of JSON, and checks such histories for
// linearizability the way Jepsen does: every operation has an invocation
// and a return time, and an outcome that is ok (with its result), fail (a
// definite error: it did not change the ledger) or info (indeterminate:
// the client cannot know whether it applied).
//
// A Recorder streams the operations to a file as they return, so a long
// run holds none of them in memory. Check reads them back and asks
// porcupine whether some order of the operations, each taking effect
// between its invocation and its return (an indeterminate one at any time
// after its invocation, or never), explains every result.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kind is what an operation does, named as the Accounts methods are, in
// lower case.
type Kind string

// The operations of the bank that a history holds.
const (
	Open     Kind = "open"
	Deposit  Kind = "deposit"
	Withdraw Kind = "withdraw"
	Transfer Kind = "transfer"
	Balance  Kind = "balance"
)

func (k Kind) valid() bool {
	switch k {
	case Open, Deposit, Withdraw, Transfer, Balance:
		return true
	}
	return false
}

// write reports whether the operation changes the ledger when it applies.
func (k Kind) write() bool { return k != Balance }

// Outcome is what the client knows of an operation once it returned.
type Outcome string

const (
	// OK: it applied (a read: it read), with the result in Op.Balance.
	OK Outcome = "ok"
	// Fail: it did not change the ledger. Op.Error says why: an error of
	// the service (the handler ran and refused, e.g. insufficient funds)
	// or the runtime's word that no node ran it.
	Fail Outcome = "fail"
	// Info: indeterminate; it may or may not have applied (no answer
	// before the deadline, the failover budget spent, ...). Op.Error is
	// what the client was told.
	Info Outcome = "info"
)

// Op is one operation of a history: one line of the file.
type Op struct {
	Process string `json:"process"`      // the client process, e.g. bankload's -name
	Client  int    `json:"client"`       // the caller within the process: one operation at a time each
	ID      string `json:"id,omitempty"` // the operation ID, in hex
	Kind    Kind   `json:"op"`
	// Accounts the operation names: one, or a transfer's source and
	// destination in that order.
	Accounts []string `json:"accounts"`
	// Amount is an open's initial balance, or the amount deposited,
	// withdrawn or transferred; 0 for a read.
	Amount int64 `json:"amount,omitempty"`
	// Invoke and Return are wall-clock times in Unix nanoseconds, taken
	// just before the call and just after it returned. Processes on one
	// machine share the clock, so their histories merge.
	Invoke  int64   `json:"invoke"`
	Return  int64   `json:"return"`
	Outcome Outcome `json:"outcome"`
	// Balance is the balance answered when OK: the account's after the
	// write, a transfer's source account's after it, or the balance read.
	Balance int64  `json:"balance"`
	Error   string `json:"error,omitempty"` // Fail and Info: the error
}

// Failed reports whether op failed for want of service: it ended in an
// error that is not one of the service's answers the check judges (a
// refusal, failovers run out), and its outcome is known.
func (op *Op) Failed() bool { return op.Outcome == Fail && !judged[op.Error] }

// Now is the clock of histories: wall-clock Unix nanoseconds.
func Now() int64 { return time.Now().UnixNano() }

// check reports what is wrong with op, if anything.
func (op *Op) check() error {
	switch {
	case !op.Kind.valid():
		return fmt.Errorf("unknown operation %q", op.Kind)
	case op.Kind == Transfer && len(op.Accounts) != 2, op.Kind != Transfer && len(op.Accounts) != 1:
		return fmt.Errorf("%s names %d accounts", op.Kind, len(op.Accounts))
	case op.Outcome != OK && op.Outcome != Fail && op.Outcome != Info:
		return fmt.Errorf("unknown outcome %q", op.Outcome)
	case op.Return < op.Invoke:
		return fmt.Errorf("returned at %d before its invocation at %d", op.Return, op.Invoke)
	}
	return nil
}

// Counts are a history's operations by outcome.
type Counts struct {
	Ops           uint64 `json:"ops"`
	OK            uint64 `json:"ok"`
	Failed        uint64 `json:"failed"`        // Fail
	Indeterminate uint64 `json:"indeterminate"` // Info
}

func (c *Counts) add(op *Op) {
	c.Ops++
	switch op.Outcome {
	case OK:
		c.OK++
	case Fail:
		c.Failed++
	case Info:
		c.Indeterminate++
	}
}

// Recorder writes a history as operations return: one JSON line each,
// through a buffer, so that its memory does not grow with the run. It is
// safe for concurrent use; a nil *Recorder records nothing.
type Recorder struct {
	process string

	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	enc    *json.Encoder
	counts Counts
	err    error // the first write error
}

// Create starts the history of process in a new file at path.
func Create(path, process string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	return &Recorder{process: process, f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// Record appends op, its Process set to the recorder's.
func (r *Recorder) Record(op Op) {
	if r == nil {
		return
	}
	op.Process = r.process
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts.add(&op)
	if r.err == nil {
		r.err = r.enc.Encode(&op)
	}
}

// Counts returns the operations recorded so far, by outcome.
func (r *Recorder) Counts() Counts {
	if r == nil {
		return Counts{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts
}

// Close flushes the history and closes its file. It returns the first
// error met while recording, if any: a history with a hole in it would
// make the check blame the cluster for the missing operations.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := errors.Join(r.err, r.w.Flush(), r.f.Close())
	r.err = errors.New("history closed")
	return err
}

// Read decodes a history, one operation per line, checking each.
func Read(rd io.Reader) ([]Op, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(rd, 64<<10))
	var ops []Op
	for {
		var op Op
		err := dec.Decode(&op)
		if errors.Is(err, io.EOF) {
			return ops, nil
		}
		if err != nil {
			return nil, fmt.Errorf("operation %d: %w", len(ops)+1, err)
		}
		if err := op.check(); err != nil {
			return nil, fmt.Errorf("operation %d (%s %s): %w", len(ops)+1, op.Process, op.ID, err)
		}
		ops = append(ops, op)
	}
}

// ReadFiles reads and merges the histories at paths: several client
// processes of one run, each with a history of its own.
func ReadFiles(paths ...string) ([]Op, error) {
	var all []Op
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		ops, err := Read(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, ops...)
	}
	return all, nil
}

// Count returns the operations of a history by outcome.
func Count(ops []Op) Counts {
	var c Counts
	for i := range ops {
		c.add(&ops[i])
	}
	return c
}
