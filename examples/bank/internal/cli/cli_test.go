package cli

import (
	"slices"
	"testing"
	"time"
)

func TestFlagsDefaultToEnvironment(t *testing.T) {
	t.Setenv("T_NAME", "from-env")
	t.Setenv("T_WAIT", "3s")
	t.Setenv("T_N", "7")
	t.Setenv("T_BAD", "soon")
	f := NewFlags("x", "")
	name := f.String("name", "T_NAME", "def", "")
	other := f.String("other", "T_UNSET", "def", "")
	wait := f.Duration("wait", "T_WAIT", time.Second, "")
	n := f.Int("n", "T_N", 1, "")
	f.Duration("bad", "T_BAD", time.Second, "")
	if err := f.Parse([]string{"-n", "9"}); err != nil {
		t.Fatal(err)
	}
	if *name != "from-env" || *other != "def" || *wait != 3*time.Second || *n != 9 {
		t.Errorf("got name=%q other=%q wait=%v n=%d", *name, *other, *wait, *n)
	}
	if len(f.Errs) != 1 {
		t.Errorf("Errs = %v, want one for T_BAD", f.Errs)
	}
}

func TestList(t *testing.T) {
	if got := List(" a, ,b ,"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("List = %q", got)
	}
	if List("") != nil {
		t.Error("List(\"\") not empty")
	}
}
