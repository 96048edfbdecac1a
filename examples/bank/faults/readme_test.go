//go:build unix

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's table of faults is the suite's: a row for every fault it
// runs and none for a fault it does not, so that a reader of a result table
// finds what each row did.
func TestREADMEListsEveryFault(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The fault suite\n")
	if !ok {
		t.Fatal("examples/bank/README.md has no section \"The fault suite\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
	}
	for _, f := range faults {
		if !listed[f.name] {
			t.Errorf("examples/bank/README.md has no row for the fault %s (%s)", f.name, f.about)
		}
		delete(listed, f.name)
	}
	for name := range listed {
		t.Errorf("examples/bank/README.md has a row for %s, which the suite does not run", name)
	}
}
