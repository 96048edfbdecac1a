//go:build unix

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/testbed"
)

// TestDemo runs a short version of make demo: real processes over TCP and
// memberlist, a node killed and another frozen during the load. It asserts
// outcomes only: the audit of every surviving node passes (no acknowledged
// write lost or applied twice) and no caller waited past the operation
// deadline plus a generous margin.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and runs for about 15 s")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := testbed.Build(ctx, dir); err != nil {
		t.Fatal(err)
	}
	const opTimeout = 2 * time.Second
	var out, progress bytes.Buffer
	s := Scenario{
		BinDir: dir, Dir: dir,
		Duration: 10 * time.Second, KillAt: 3 * time.Second, FreezeAt: 5 * time.Second, FreezeFor: time.Second,
		// Paced, so that the test leaves CPU to the rest of the suite.
		Accounts: 100, Callers: 8, Rate: 3000,
		Env: []string{"FFGEN_OPERATION_TIMEOUT=" + opTimeout.String(), "FFGEN_ATTEMPT_TIMEOUT=1s"},
		Out: &out, Err: &progress,
	}
	res, err := s.Run(ctx)
	if err != nil {
		dumpLogs(t, dir)
		t.Fatalf("scenario: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	sum := res.Summary
	if !sum.AuditPassed || res.LoadExit != 0 {
		dumpLogs(t, dir)
		t.Fatalf("audit passed %v, bankload exit %d", sum.AuditPassed, res.LoadExit)
	}
	if sum.Operations == 0 || sum.Successes == 0 {
		t.Fatalf("no operations succeeded: %+v", sum)
	}
	audited := map[string]bool{}
	for _, n := range sum.Nodes {
		if n.Passed {
			audited[n.Node] = true
		}
		// The journals hold the whole run: a write missing there is lost.
		if n.Reachable && (!n.JournalChecked || n.JournalEvicted != 0) {
			t.Errorf("%s: journal checked %v, forgot %d writes: the audit is not complete", n.Node, n.JournalChecked, n.JournalEvicted)
		}
	}
	if !strings.Contains(out.String(), "AUDIT PASSED, COMPLETE: on all 3 audited nodes") {
		t.Errorf("the summary does not say the audit was complete:\n%s", out.String())
	}
	if !strings.Contains(progress.String(), "declared errors") || !strings.Contains(progress.String(), "  failed ") {
		t.Errorf("the progress lines do not tell declared errors from failures:\n%s", progress.String())
	}
	// The killed node is gone; the frozen one thawed and must have caught up.
	if audited["a1"] || !audited["a2"] || !audited["b1"] || !audited["b2"] {
		t.Errorf("audited nodes %v, want a2, b1 and b2", audited)
	}
	if sum.Overdue != 0 {
		t.Errorf("%d operations waited past the operation timeout", sum.Overdue)
	}
	if limit := float64((opTimeout + 2*time.Second).Milliseconds()); sum.Latency.Max > limit {
		t.Errorf("slowest operation took %.0fms, beyond the %v operation timeout plus margin", sum.Latency.Max, opTimeout)
	}
}

func dumpLogs(t *testing.T, dir string) {
	for _, n := range []string{"a1", "a2", "b1", "b2"} {
		f, err := os.Open(dir + "/" + n + ".log")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(f)
		f.Close()
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		t.Logf("%s.log:\n%s", n, strings.Join(lines, "\n"))
	}
}
