package golden

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	ge "github.com/ffgen/ffgen/internal/golden/testdata/generic_errors"
	"github.com/ffgen/ffgen/runtime"
)

// crossWire returns the error the client rebuilds from err: the first rule
// of the method that matches, its detail encoded and decoded.
func crossWire(t *testing.T, rules []runtime.ErrorRule, err error) (runtime.ErrorRule, error) {
	t.Helper()
	for _, r := range rules {
		if r.Match(err) {
			var detail []byte
			if r.Encode != nil {
				detail = r.Encode(err)
			}
			return r, r.Decode(err.Error(), detail)
		}
	}
	t.Fatalf("no rule matches %v", err)
	return runtime.ErrorRule{}, nil
}

// Each instance of a generic error type is a rule of its own, matched and
// rebuilt with its type arguments.
func TestGenericErrorTypes(t *testing.T) {
	rules := ge.IndexDesc.Methods[0].Errors
	r, got := crossWire(t, rules, fmt.Errorf("lookup: %w", &ge.NotFound[string]{Key: "k"}))
	var nfs *ge.NotFound[string]
	if r.Code != "*NotFound[string]" || r.Directive != runtime.Fail || !errors.As(got, &nfs) || nfs.Key != "k" {
		t.Errorf("NotFound[string]: rule %s %v, rebuilt %#v", r.Code, r.Directive, got)
	}
	r, got = crossWire(t, rules, &ge.NotFound[int64]{Key: -7})
	var nfi *ge.NotFound[int64]
	if r.Code != "*NotFound[int64]" || r.Directive != runtime.Failover || !errors.As(got, &nfi) || nfi.Key != -7 {
		t.Errorf("NotFound[int64]: rule %s %v, rebuilt %#v", r.Code, r.Directive, got)
	}
	r, got = crossWire(t, rules, ge.Pair[string, []int]{First: "a", Second: []int{1, 2}})
	var p ge.Pair[string, []int]
	if r.Code != "Pair[string, []int]" || !errors.As(got, &p) || p.First != "a" || !slices.Equal(p.Second, []int{1, 2}) {
		t.Errorf("Pair: rule %s, rebuilt %#v", r.Code, got)
	}
}
