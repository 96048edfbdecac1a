package testkit

import (
	"os/exec"
	"syscall"
)

// Burners are processes that spin on the CPU, to measure what a busy
// machine does to latency and failure detection: a CPU that always has
// something to run is woken by preemption, never from idle, and a thread
// that wakes may wait for a turn.
type Burners struct{ cmds []*exec.Cmd }

// Burn starts n burners. Each dies with this process however it ends
// (Linux's parent-death signal): a burner left behind would skew every
// later measurement on the machine.
func Burn(n int) (*Burners, error) {
	b := &Burners{}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = Orphanless()
		if err := c.Start(); err != nil {
			b.Stop()
			return nil, err
		}
		b.cmds = append(b.cmds, c)
	}
	return b, nil
}

// Stop kills the burners and waits for them to end. It may be called
// more than once.
func (b *Burners) Stop() {
	for _, c := range b.cmds {
		c.Process.Kill()
		c.Wait()
	}
	b.cmds = nil
}

// Orphanless makes a child process die with this one, however it ends.
func Orphanless() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
