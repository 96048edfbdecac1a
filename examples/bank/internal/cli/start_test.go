package cli

import (
	"strings"
	"testing"
)

func TestStartLogger(t *testing.T) {
	t.Setenv("CLI_TEST_N", "many")
	f := NewFlags("cmd", "")
	if log, err := f.logger("info"); err != nil || log == nil {
		t.Fatalf("logger(info) = %v, %v", log, err)
	}
	f.Int("n", "CLI_TEST_N", 1, "")
	if _, err := f.logger("loud"); err == nil || !strings.Contains(err.Error(), `log level "loud"`) {
		t.Errorf("logger(loud) error = %v, want the level's", err)
	}
	if _, err := f.logger("info"); err == nil || !strings.Contains(err.Error(), `CLI_TEST_N="many"`) {
		t.Errorf("logger(info) error = %v, want the environment's", err)
	}
}
