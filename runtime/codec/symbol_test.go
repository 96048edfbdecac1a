package codec

import (
	"fmt"
	"testing"
)

func TestSymbolReusesStringsAndStaysBounded(t *testing.T) {
	table := map[string]string{}
	enc := AppendString(AppendString(nil, "bank.Accounts"), "bank.Accounts")
	r := NewReader(enc)
	r.UseSymbols(table)
	a, b := r.Symbol(), r.Symbol()
	if err := r.Done(); err != nil || a != "bank.Accounts" || b != a {
		t.Fatalf("Symbol = %q, %q, %v", a, b, err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		r.Reset(enc)
		r.Symbol()
		r.Symbol()
	}); allocs != 0 {
		t.Errorf("a known symbol allocates %v times", allocs)
	}
	for i := range 2 * maxSymbols {
		r.Reset(AppendString(nil, fmt.Sprint("s", i)))
		r.Symbol()
	}
	if len(table) != maxSymbols {
		t.Errorf("table grew to %d entries, bound is %d", len(table), maxSymbols)
	}
}
