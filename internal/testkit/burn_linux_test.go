package testkit

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestBurnSpinsUntilStopped checks that every burner uses CPU while it
// runs and that Stop leaves none behind.
func TestBurnSpinsUntilStopped(t *testing.T) {
	b, err := Burn(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	cmds := b.cmds
	if len(cmds) != 2 {
		t.Fatalf("%d burners running, want 2", len(cmds))
	}
	for _, c := range cmds {
		// A process that waited instead of spinning would never use
		// 200 ms of CPU within the bound.
		Until(t, fmt.Sprintf("burner %d has used 200ms of CPU", c.Process.Pid), func() bool {
			d, err := ProcessCPUTime(c.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			return d >= 200*time.Millisecond
		})
	}
	b.Stop()
	b.Stop() // a second Stop is harmless
	for _, c := range cmds {
		if c.ProcessState == nil {
			t.Errorf("burner %d was not waited for", c.Process.Pid)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", c.Process.Pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("burner %d still exists after Stop: %v", c.Process.Pid, err)
		}
	}
}
