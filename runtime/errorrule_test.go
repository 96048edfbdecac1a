package runtime_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
)

var errRuleBusy = errors.New("busy")

// ruleNotFoundError has a pointer receiver: declared as *ruleNotFoundError.
type ruleNotFoundError struct{ Account string }

func (e *ruleNotFoundError) Error() string { return "no account " + e.Account }

// ruleLimitError has a value receiver: declared as ruleLimitError.
type ruleLimitError struct{ Limit int64 }

func (e ruleLimitError) Error() string { return fmt.Sprintf("over the limit %d", e.Limit) }

func encodeNotFound(e *ruleNotFoundError) []byte {
	if e == nil {
		return nil
	}
	return codec.AppendString(nil, e.Account)
}

func decodeNotFound(_ string, detail []byte) (*ruleNotFoundError, error) {
	r := codec.NewReader(detail)
	e := &ruleNotFoundError{Account: r.String()}
	return e, r.Done()
}

func encodeLimit(e ruleLimitError) []byte { return codec.AppendVarint(nil, e.Limit) }

func decodeLimit(_ string, detail []byte) (ruleLimitError, error) {
	r := codec.NewReader(detail)
	e := ruleLimitError{Limit: r.Varint()}
	return e, r.Done()
}

var (
	notFoundRule = runtime.ErrorType("*ruleNotFoundError", runtime.Fail, encodeNotFound, decodeNotFound)
	limitRule    = runtime.ErrorType("ruleLimitError", runtime.Failover, encodeLimit, decodeLimit)
	busyRule     = runtime.ErrorValue("errRuleBusy", runtime.Failover, errRuleBusy)
)

// wire does what server and client do with a rule: match and encode the
// handler's error, then decode it from the message and detail.
func wire(t *testing.T, rule runtime.ErrorRule, err error) error {
	t.Helper()
	if !rule.Match(err) {
		t.Fatalf("%s does not match %v", rule.Code, err)
	}
	var detail []byte
	if rule.Encode != nil {
		detail = rule.Encode(err)
	}
	return rule.Decode(err.Error(), detail)
}

func TestErrorValue(t *testing.T) {
	if busyRule.Code != "errRuleBusy" || busyRule.Directive != runtime.Failover || busyRule.Encode != nil {
		t.Fatalf("rule = %+v", busyRule)
	}
	for _, err := range []error{errRuleBusy, fmt.Errorf("add: %w", errRuleBusy), errors.Join(io.EOF, errRuleBusy)} {
		if got := wire(t, busyRule, err); got != errRuleBusy {
			t.Errorf("decode(%v) = %v, want the sentinel itself", err, got)
		}
	}
	for _, err := range []error{errors.New("busy"), io.EOF, &ruleNotFoundError{}} {
		if busyRule.Match(err) {
			t.Errorf("matches %v", err)
		}
	}
}

func TestErrorTypePointer(t *testing.T) {
	for _, err := range []error{
		&ruleNotFoundError{Account: "a-1"},
		fmt.Errorf("withdraw: %w", &ruleNotFoundError{Account: "a-1"}),
		fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", &ruleNotFoundError{Account: "a-1"})),
	} {
		got := wire(t, notFoundRule, err)
		var nf *ruleNotFoundError
		if !errors.As(got, &nf) || nf.Account != "a-1" {
			t.Errorf("decode(%v) = %#v, want *ruleNotFoundError{a-1}", err, got)
		}
	}
	for _, err := range []error{ruleLimitError{}, errRuleBusy, errors.New("no account a-1")} {
		if notFoundRule.Match(err) {
			t.Errorf("matches %v", err)
		}
		if b := notFoundRule.Encode(err); b != nil {
			t.Errorf("Encode(%v) = %x, want nil", err, b)
		}
	}
}

func TestErrorTypeValue(t *testing.T) {
	for _, err := range []error{ruleLimitError{Limit: 7}, fmt.Errorf("withdraw: %w", ruleLimitError{Limit: 7})} {
		got := wire(t, limitRule, err)
		var le ruleLimitError
		if !errors.As(got, &le) || le.Limit != 7 {
			t.Errorf("decode(%v) = %#v, want ruleLimitError{7}", err, got)
		}
	}
	// A pointer to a value-receiver type is a different type, as for errors.As.
	if limitRule.Match(&ruleLimitError{Limit: 7}) {
		t.Error("ruleLimitError rule matches *ruleLimitError")
	}
}

// A nil pointer of the declared type still matches, as with errors.As; its
// detail is empty and the client keeps the message.
func TestErrorTypeNilPointer(t *testing.T) {
	var nf *ruleNotFoundError
	err := fmt.Errorf("lookup: %w", error(nf))
	if !notFoundRule.Match(err) {
		t.Fatal("a wrapped nil *ruleNotFoundError does not match")
	}
	if b := notFoundRule.Encode(err); b != nil {
		t.Fatalf("Encode = %x, want nil", b)
	}
}

func TestErrorTypeBadDetail(t *testing.T) {
	got := notFoundRule.Decode("no account a-1", []byte{0xff})
	var de *runtime.DetailError
	if !errors.As(got, &de) {
		t.Fatalf("Decode = %#v, want *runtime.DetailError", got)
	}
	if de.Code != "*ruleNotFoundError" || de.Message != "no account a-1" || de.Err == nil {
		t.Errorf("DetailError = %+v", de)
	}
	var nf *ruleNotFoundError
	if errors.As(got, &nf) {
		t.Error("an undecodable detail still gives a *ruleNotFoundError")
	}
	if want := "no account a-1 (*ruleNotFoundError detail undecodable: "; len(got.Error()) < len(want) || got.Error()[:len(want)] != want {
		t.Errorf("Error() = %q", got.Error())
	}
}

func TestErrorRuleMatchAllocs(t *testing.T) {
	wrapped := fmt.Errorf("withdraw: %w", &ruleNotFoundError{Account: "a-1"})
	other := fmt.Errorf("withdraw: %w", errRuleBusy)
	for name, f := range map[string]func(){
		"type hit":   func() { notFoundRule.Match(wrapped) },
		"type miss":  func() { notFoundRule.Match(other) },
		"value hit":  func() { busyRule.Match(other) },
		"value miss": func() { busyRule.Match(wrapped) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per Match, want 0", name, n)
		}
	}
}

// BenchmarkErrorTypeMatch compares the rule's Match with the errors.As
// closure generated code used to carry.
func BenchmarkErrorTypeMatch(b *testing.B) {
	wrapped := fmt.Errorf("withdraw: %w", &ruleNotFoundError{Account: "a-1"})
	b.Run("rule", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !notFoundRule.Match(wrapped) {
				b.Fatal("no match")
			}
		}
	})
	b.Run("errors.As", func(b *testing.B) {
		match := func(err error) bool {
			var target *ruleNotFoundError
			return errors.As(err, &target)
		}
		b.ReportAllocs()
		for b.Loop() {
			if !match(wrapped) {
				b.Fatal("no match")
			}
		}
	})
}
