package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	bank "github.com/ffgen/ffgen/examples/bank/internal/accounts"
	"github.com/ffgen/ffgen/examples/bank/internal/cli"
	"github.com/ffgen/ffgen/runtime"
)

func latency(ds []time.Duration) cli.Latency {
	if len(ds) == 0 {
		return cli.Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return ms(ds[int(q*float64(len(ds)-1))]) }
	return cli.Latency{Count: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fmtLatency(l cli.Latency) string {
	if l.Count == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %.1fms  p90 %.1fms  p99 %.1fms  max %.1fms  (%d)", l.P50, l.P90, l.P99, l.Max, l.Count)
}

func summarize(run string, elapsed time.Duration, ts []*tally, s runtime.Settings) *cli.Summary {
	sum := &cli.Summary{
		Run: run, ServiceVersion: bank.Version, Duration: elapsed.Seconds(),
		ByMethod: map[string]uint64{}, Errors: map[string]uint64{}, Failovers: map[string]uint64{},
		ScatterLegs: map[string]uint64{}, FailoverByReason: map[string]cli.Latency{}, Refusals: map[string]uint64{},
		OperationTimeout: ms(s.OperationTimeout), HeartbeatTimeout: ms(s.HeartbeatTimeout),
	}
	var lat, admitted, folat []time.Duration
	byReason := map[string][]time.Duration{}
	var byKind [numKinds][]time.Duration
	for _, t := range ts {
		sum.Operations += t.ops
		sum.Successes += t.ok
		sum.Timeouts += t.timeouts
		sum.Uncertain += t.uncertain
		sum.Failed += t.failed
		sum.Overdue += t.overdue
		for k, n := range t.byKind {
			if n > 0 {
				sum.ByMethod[kindNames[k]] += n
			}
		}
		for k, n := range t.errors {
			sum.Errors[k] += n
		}
		for k, n := range t.newMethods {
			if sum.NewMethods == nil {
				sum.NewMethods = map[string]uint64{}
			}
			sum.NewMethods[k] += n
		}
		lat = append(lat, t.latencies...)
		for k, ds := range t.admitted {
			admitted = append(admitted, ds...)
			byKind[k] = append(byKind[k], ds...)
		}
		for k, n := range t.refusals {
			sum.Refusals[k] += n
		}
		folat = append(folat, t.failoverLat...)
		for r, ds := range t.failoverLatBy {
			byReason[r] = append(byReason[r], ds...)
		}
	}
	if elapsed > 0 {
		sum.OpsPerSecond = float64(sum.Operations) / elapsed.Seconds()
	}
	sum.Latency = latency(lat)
	sum.Admitted = latency(admitted)
	for k, ds := range byKind {
		if len(ds) > 0 {
			if sum.AdmittedByMethod == nil {
				sum.AdmittedByMethod = map[string]cli.Latency{}
			}
			sum.AdmittedByMethod[kindNames[k]] = latency(ds)
		}
	}
	sum.FailoverLatency = latency(folat)
	for r, ds := range byReason {
		sum.FailoverByReason[r] = latency(ds)
	}
	return sum
}

func printSummary(w io.Writer, s *cli.Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("== bankload run %s ==", s.Run)
	p("operations      %d in %.1fs (%.0f ops/s), %d ok", s.Operations, s.Duration, s.OpsPerSecond, s.Successes)
	p("by method       %s", counts(s.ByMethod))
	p("errors          %s", counts(s.Errors))
	p("                (declared errors, such as ErrInsufficientFunds, are the service's answers, not failures)")
	p("timeouts        %d", s.Timeouts)
	p("uncertain       %d writes of unknown outcome (the audit accepts either outcome for them)", s.Uncertain)
	p("failed          %d operations failed: an error other than ErrInsufficientFunds, not of unknown outcome", s.Failed)
	if s.History != "" {
		p("history         %s; %d operations of unknown outcome, reads included", s.History, s.Indeterminate)
	}
	p("refused         %s (not executed)", counts(s.Refusals))
	p("suspicions      %s", counts(s.Suspicions))
	p("failovers       %s", counts(s.Failovers))
	p("write attempts  ended without an answer: %s", counts(s.ScatterLegs))
	p("latency         %s", fmtLatency(s.Latency))
	p("admitted        %s", fmtLatency(s.Admitted))
	p("failed over     %s", fmtLatency(s.FailoverLatency))
	for _, r := range slices.Sorted(maps.Keys(s.FailoverByReason)) {
		p("  after %-17s %s", r, fmtLatency(s.FailoverByReason[r]))
	}
	if l, ok := s.FailoverByReason[runtime.ReasonHeartbeatTimeout.String()]; ok {
		verdict := "within"
		if l.P99 > s.HeartbeatTimeout+100 {
			verdict = "over"
		}
		p("failover p99 after a freeze: %.1fms, %s the target of heartbeat timeout + 100ms (%.0fms); longest %.1fms",
			l.P99, verdict, s.HeartbeatTimeout+100, l.Max)
	}
	p("overdue         %d operations waited past the operation timeout (%.0fms) plus margin", s.Overdue, s.OperationTimeout)
	printAudit(w, s)
	printCheck(w, s)
}

// printCheck prints the linearizability check, if there was one.
func printCheck(w io.Writer, s *cli.Summary) {
	if s.Linearizable == "" {
		return
	}
	fmt.Fprintf(w, "history check   %s\n", s.HistoryCheck)
	fmt.Fprintf(w, "history linearizable: %s\n", s.LinearizableDetail)
}

// printAudit prints the audit, if there was one.
func printAudit(w io.Writer, s *cli.Summary) {
	if !s.Audited {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("audit of %d writes (%d of unknown outcome)%s:", s.Writes, s.Uncertain, writers(s.Writers))
	for _, n := range s.Nodes {
		switch {
		case !n.Reachable:
			p("  %-22s unreachable, not audited: %s", n.Addr, n.Error)
		case n.Passed:
			p("  %-22s %s (group %s): %d accounts match; %d writes applied, %d repeats answered from memory%s",
				n.Addr, n.Node, n.Group, n.Accounts, n.Applied, n.Replayed, journalNote(n))
		default:
			p("  %-22s %s (group %s): FAILED; lost %d, applied twice %d, contradicting %d%s",
				n.Addr, n.Node, n.Group, n.Lost, n.AppliedTwice, n.Contradicting, journalNote(n))
			if n.Error != "" {
				p("      %s", n.Error)
			}
			for _, m := range n.Mismatches {
				p("      balance %s", m)
			}
			for _, m := range n.Problems {
				p("      %s", m)
			}
		}
	}
	p("acknowledged writes lost %d, applied twice %d, contradicting the replicas %d", s.Lost, s.AppliedTwice, s.Contradicting)
	p("%s", auditVerdict(s))
}

// auditVerdict is the one line that says what the audit proved: on how
// many nodes, and whether every journal still held every write, without
// which a lost write there could go unseen.
func auditVerdict(s *cli.Summary) string {
	if !s.AuditPassed {
		return "AUDIT FAILED"
	}
	audited, complete := 0, 0
	var forgot []string
	for _, n := range s.Nodes {
		if !n.Reachable {
			continue
		}
		audited++
		switch {
		case n.JournalChecked && n.JournalEvicted == 0:
			complete++
		case n.JournalChecked:
			forgot = append(forgot, fmt.Sprintf("%s forgot %d", n.Node, n.JournalEvicted))
		default:
			forgot = append(forgot, n.Node+" has no journal")
		}
	}
	if complete == audited {
		return fmt.Sprintf("AUDIT PASSED, COMPLETE: on all %d audited nodes the balances match and every one of the %d writes "+
			"is in the journal as its caller was told (none lost, none applied twice, none contradicted)", audited, s.Writes)
	}
	return fmt.Sprintf("AUDIT PASSED, INCOMPLETE: the balances match on %d nodes and no write was applied twice or contradicted, "+
		"but lost writes were checked on %d of them only (%s): raise banknode -journal", audited, complete, strings.Join(forgot, ", "))
}

func writers(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" from %d writer logs", n)
}

func journalNote(n cli.NodeAudit) string {
	switch {
	case !n.JournalChecked:
		return "; journal not checked"
	case n.JournalEvicted > 0:
		return fmt.Sprintf("; its journal forgot %d writes, so lost writes are not counted on it (raise banknode -journal)", n.JournalEvicted)
	}
	return ""
}

func counts(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func writeJSON(path string, s *cli.Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
