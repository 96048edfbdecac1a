//go:build unix

package main

import (
	"fmt"
	"io"
	"strings"
	"time"
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
	p("   %-14s %d", "lost", r.Lost)
	p("   %-14s %d", "applied twice", r.AppliedTwice)
	p("   %-14s %d", "contradicting", r.Contradicting)
	p("   %-14s %s", "catch-up", catchUps(r.CatchUp))
	p("   %-14s %s", "audit", verdict(r))
	for _, n := range r.Notes {
		p("   note: %s", n)
	}
}

// printTable prints every fault's row in one table.
func printTable(w io.Writer, rows []Row) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("")
	p("%-19s %8s %7s %9s %6s %13s %13s  %-24s %s", "fault", "ops", "failed", "uncertain", "lost", "applied twice", "contradicting", "catch-up", "audit")
	for _, r := range rows {
		if r.Skipped != "" {
			p("%-19s skipped: %s", r.Fault, r.Skipped)
			continue
		}
		p("%-19s %8d %7d %9d %6d %13d %13d  %-24s %s", r.Fault, r.Ops, r.Failed, r.Uncertain, r.Lost, r.AppliedTwice, r.Contradicting, catchUps(r.CatchUp), verdict(r))
	}
}

func verdict(r Row) string {
	if r.Passed {
		return "PASSED on every node"
	}
	return "FAILED"
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
