//go:build unix

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ffgen/ffgen/examples/bank/internal/history"
)

// printRow prints one fault's table.
func printRow(w io.Writer, r Row) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("-- %s", r.Fault)
	if r.Skipped != "" {
		p("   SKIPPED: %s", r.Skipped)
		return
	}
	p("   %-14s %d", "ops", r.Ops)
	p("   %-14s %d", "failed", r.Failed)
	p("   %-14s %d", "uncertain", r.Uncertain)
	p("   %-14s %d", "indeterminate", r.Indeterminate)
	p("   %-14s %d", "lost", r.Lost)
	p("   %-14s %d", "applied twice", r.AppliedTwice)
	p("   %-14s %d", "contradicting", r.Contradicting)
	p("   %-14s %s", "catch-up", catchUps(r.CatchUp))
	p("   %-14s %s", "verdict", verdict(r))
	p("   history linearizable: %s", linearizable(r))
	for _, n := range r.Notes {
		p("   note: %s", n)
	}
}

// printTable prints every fault's row in one table.
func printTable(w io.Writer, rows []Row) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("%-22s %8s %7s %13s %6s %13s %13s %12s  %-24s %s", "fault", "ops", "failed", "indeterminate", "lost", "applied twice", "contradicting", "linearizable", "catch-up", "verdict")
	for _, r := range rows {
		if r.Skipped != "" {
			p("%-22s skipped: %s", r.Fault, r.Skipped)
			continue
		}
		p("%-22s %8d %7d %13d %6d %13d %13d %12s  %-24s %s", r.Fault, r.Ops, r.Failed, r.Indeterminate, r.Lost, r.AppliedTwice, r.Contradicting,
			r.Linearizable, catchUps(r.CatchUp), verdict(r))
	}
}

// verdict is the row's, and what failed.
func verdict(r Row) string {
	if r.Passed {
		return "PASSED on every node"
	}
	var why []string
	if !r.AuditPassed {
		why = append(why, "audit")
	}
	switch {
	case r.StaleReadsOnly:
		why = append(why, "reads not linearizable")
	case r.Linearizable == string(history.No) || r.Linearizable == "unreadable":
		why = append(why, "not linearizable")
	}
	if len(why) == 0 {
		why = append(why, "see the notes")
	}
	return "FAILED: " + strings.Join(why, ", ")
}

// linearizable is the history's verdict and why.
func linearizable(r Row) string {
	if r.LinearizableDetail != "" {
		return r.LinearizableDetail
	}
	if r.Linearizable != "" {
		return r.Linearizable
	}
	return "not checked"
}

func catchUps(cs []catchUp) string {
	if len(cs) == 0 {
		return "-"
	}
	var parts []string
	for _, c := range cs {
		if c.ready {
			parts = append(parts, fmt.Sprintf("%s %.1fs", c.node, c.took.Round(100*time.Millisecond).Seconds()))
		} else {
			parts = append(parts, fmt.Sprintf("%s not ready", c.node))
		}
	}
	return strings.Join(parts, ", ")
}
