//go:build unix

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// shortFaults are the faults of the short version, one of each kind of
// trouble: a crash and restart, a restart during catch-up, a freeze, a
// partition, hostile connections, several writers, and a random schedule
// of faults.
var shortFaults = []string{"kill9-restart", "restart-in-catchup", "sigstop", "partition-both", "hostile", "writers", "random"}

// TestFaults runs the short version of make faults: real processes on
// loopback, a few seconds of paced load per fault. It asserts outcomes only:
// every node's audit passes, with no acknowledged write lost, applied twice
// or contradicted, every node that came back is ready again, and the
// history, reads included, is not found non-linearizable.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; about a minute")
	}
	var selected []fault
	for _, name := range shortFaults {
		selected = append(selected, faults[indexFault(name)])
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := testbed.Build(ctx, dir); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := Suite{
		BinDir: dir, Dir: dir,
		// Paced, so that the test leaves CPU to the rest of the suite.
		Duration: 5 * time.Second, Rate: 500, Accounts: 50, Callers: 4, Writers: 2,
		AuditTimeout: 20 * time.Second,
		Env:          []string{"FFGEN_OPERATION_TIMEOUT=2s", "FFGEN_ATTEMPT_TIMEOUT=1s"},
		Out:          &out,
	}
	rows, err := s.Run(ctx, selected)
	printTable(&out, rows)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(selected) {
		t.Fatalf("%d rows for %d faults", len(rows), len(selected))
	}
	for _, r := range rows {
		switch {
		case r.Skipped != "":
			t.Logf("%s skipped: %s", r.Fault, r.Skipped)
		case !r.Passed:
			t.Errorf("%s: %s: lost %d, applied twice %d, contradicting %d, catch-up %s, linearizable %s; %q",
				r.Fault, verdict(r), r.Lost, r.AppliedTwice, r.Contradicting, catchUps(r.CatchUp), r.Linearizable, r.Notes)
		case r.Ops == 0 || r.Lost != 0 || r.AppliedTwice != 0 || r.Contradicting != 0:
			t.Errorf("%s passed with %d ops, lost %d, applied twice %d, contradicting %d", r.Fault, r.Ops, r.Lost, r.AppliedTwice, r.Contradicting)
		}
	}
}

// TestMixedVersions runs the bank service at v1 and at v2 (a request
// field added in the middle, one widened from int32 to int64, one turned
// from string to bytes, a result field added and one removed, a method and
// a declared error added; examples/bank/internal/v2) in one cluster under
// load, over real processes: the writers of both versions send transfers
// with a reference (a string in v1, bytes in v2) and v2 leaves the memo it
// added unset, so that their transfers and opens go through the leader's
// field check, write by write. b1 and b2 are upgraded while a v1 and a
// v2 writer run, and both versions serve until the audit. Every
// node's audit passes (no acknowledged write lost, applied twice or
// contradicted: no replica drifts), the history is not found
// non-linearizable, the v2 writer's calls of the new method succeed once
// v2 nodes serve it (before, they are refused as not implemented, and
// while the only v2 nodes restart, they may fail), and once both v2 nodes
// are up, clients of each version get what they expect from either
// version's nodes, and the writes that set what a v1 voter cannot apply
// are refused, not executed (checkVersions, which fails the row
// otherwise).
func TestMixedVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and builds two versions of the bank; about half a minute")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	next := filepath.Join(dir, "next")
	if err := testbed.Build(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if err := testbed.Build(ctx, next, testbed.NextVersion); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := Suite{
		BinDir: dir, Dir: dir, NextBinDir: next,
		Duration: 8 * time.Second, Rate: 400, Accounts: 50, Callers: 4, Writers: 2,
		AuditTimeout: 20 * time.Second,
		Env:          []string{"FFGEN_OPERATION_TIMEOUT=2s", "FFGEN_ATTEMPT_TIMEOUT=1s"},
		Out:          &out,
	}
	rows, err := s.Run(ctx, []fault{faults[indexFault("mixed-versions")]})
	printTable(&out, rows)
	t.Logf("\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	switch {
	case r.Skipped != "":
		t.Skipf("mixed-versions skipped: %s", r.Skipped)
	case !r.Passed:
		t.Errorf("%s: lost %d, applied twice %d, contradicting %d, linearizable %s; %q",
			verdict(r), r.Lost, r.AppliedTwice, r.Contradicting, r.Linearizable, r.Notes)
	}
	if r.Ops == 0 || r.Lost != 0 || r.AppliedTwice != 0 || r.Contradicting != 0 {
		t.Errorf("%d ops, lost %d, applied twice %d, contradicting %d", r.Ops, r.Lost, r.AppliedTwice, r.Contradicting)
	}
	if r.NewMethods["ok"] == 0 {
		t.Errorf("the v2 writer's calls of Exists: %v; want some ok once v2 nodes serve it", r.NewMethods)
	}
	t.Logf("failed %d of %d operations; Exists: %v", r.Failed, r.Ops, r.NewMethods)
}
