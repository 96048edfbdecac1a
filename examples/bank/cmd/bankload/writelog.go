package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
)

// writeLog is one writer's record of its writes: what it sent, under which
// operation ID, and what it was told. Several writers on the same accounts
// each write theirs with -writes; the audit merges them (-audit-only).
type writeLog struct {
	Run      string        `json:"run"`
	Writer   string        `json:"writer"`
	Accounts int           `json:"accounts"`
	Initial  int64         `json:"initial"`
	Writes   []writeRecord `json:"writes"`

	mu sync.Mutex
}

// writeRecord is one write. The audit looks its ID up in every node's
// journal: an applied write must be there with the balance the caller was
// told, a refused one with the error, one never executed must be absent.
type writeRecord struct {
	ID      string  `json:"id"` // operation ID in hex
	Method  string  `json:"method"`
	Deltas  []delta `json:"deltas,omitempty"`
	Outcome outcome `json:"outcome"`
	Amount  int64   `json:"amount,omitempty"` // the balance the caller was told, if applied
	Err     string  `json:"err,omitempty"`    // the declared error it was told, if refused
}

type delta struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// newOpID draws a write's operation ID. It must be unique across writers:
// servers deduplicate on it.
func newOpID() [16]byte {
	var id [16]byte
	rand.Read(id[:])
	return id
}

// add records a write and its outcome.
func (l *writeLog) add(id [16]byte, method string, amount int64, err error, deltas ...delta) {
	r := writeRecord{ID: hex.EncodeToString(id[:]), Method: method, Deltas: deltas, Outcome: classify(err)}
	switch r.Outcome {
	case applied:
		r.Amount = amount
	case refused:
		r.Err = declaredError(err).Error()
	}
	l.mu.Lock()
	l.Writes = append(l.Writes, r)
	l.mu.Unlock()
}

func (l *writeLog) save(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// loadLogs reads writers' logs and checks that they describe one run.
func loadLogs(paths []string) ([]*writeLog, error) {
	if len(paths) == 0 {
		return nil, errors.New("no writer logs")
	}
	var logs []*writeLog
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		l := new(writeLog)
		if err := json.Unmarshal(b, l); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if l.Run == "" || l.Accounts < 1 {
			return nil, fmt.Errorf("%s: not a writer log (no run or accounts)", p)
		}
		if f := logs; len(f) > 0 && (l.Run != f[0].Run || l.Accounts != f[0].Accounts || l.Initial != f[0].Initial) {
			return nil, fmt.Errorf("%s: run %s, %d accounts at %d; %s has run %s, %d accounts at %d",
				p, l.Run, l.Accounts, l.Initial, paths[0], f[0].Run, f[0].Accounts, f[0].Initial)
		}
		logs = append(logs, l)
	}
	return logs, nil
}

// accountIDs returns the accounts of run.
func accountIDs(run string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", run, i)
	}
	return ids
}

// merge returns the balance model and every write of the logs.
func merge(logs []*writeLog) (*ledgerModel, []writeRecord) {
	first := logs[0]
	m := newModel(accountIDs(first.Run, first.Accounts), first.Initial)
	var all []writeRecord
	for _, l := range logs {
		for _, w := range l.Writes {
			m.record(w.Outcome, w.Deltas...)
		}
		all = append(all, l.Writes...)
	}
	return m, all
}
