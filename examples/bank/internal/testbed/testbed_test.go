//go:build unix

package testbed

import "testing"

func TestLastEnv(t *testing.T) {
	env := []string{"A=1", "FFGEN_MANAGE_TOKEN=old", "B", "FFGEN_MANAGE_TOKEN=new=x"}
	if got := lastEnv(env, "FFGEN_MANAGE_TOKEN"); got != "new=x" {
		t.Errorf("lastEnv = %q, want the last value", got)
	}
	if got := lastEnv(env, "B"); got != "" {
		t.Errorf("lastEnv of a bare key = %q", got)
	}
}
