package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// Run runs cmd, interrupting it (SIGINT, so that it writes what it
// measured) if ctx ends, and waits for it either way.
func Run(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	return Wait(ctx, cmd)
}

// Wait waits for cmd, started already, as Run does.
func Wait(ctx context.Context, cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		cmd.Process.Signal(os.Interrupt)
		return errors.Join(ctx.Err(), <-done)
	}
}

// ReadJSON decodes the JSON file at path (a bankload summary, a node's
// audit) into v, naming the file if it does not decode.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
