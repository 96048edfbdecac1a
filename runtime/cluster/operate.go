package cluster

import (
	"errors"
	"fmt"
)

// Operation is a change requested on a member through the management API.
type Operation string

const (
	// OpLeave makes the node leave gracefully: others see it as left and
	// stop routing to it at once. Gossip keeps running until Shutdown.
	OpLeave Operation = "leave"
	// OpDown stops the node's gossip without a leave message, as a crash
	// would: others declare it dead after the failure detector's delay.
	OpDown Operation = "down"
)

var (
	// ErrUnknownMember: no node of that name is known.
	ErrUnknownMember = errors.New("cluster: unknown member")
	// ErrNotLocal: memberlist cannot make another node leave or go down;
	// send the operation to that node's own management endpoint.
	ErrNotLocal = errors.New("cluster: operations apply to the local node only")
	// ErrBadOperation: the operation is neither leave nor down.
	ErrBadOperation = errors.New(`cluster: operation must be "leave" or "down"`)
)

// Operate carries out op on the named member, which must be this node.
func (c *Cluster) Operate(name string, op Operation) error {
	if op != OpLeave && op != OpDown {
		return fmt.Errorf("%w, got %q", ErrBadOperation, op)
	}
	if _, ok := c.Member(name); !ok {
		return fmt.Errorf("%w %q", ErrUnknownMember, name)
	}
	if name != c.cfg.Name {
		return fmt.Errorf("%w: %q is not %q", ErrNotLocal, name, c.cfg.Name)
	}
	if op == OpLeave {
		return c.Leave(DefaultLeaveTimeout)
	}
	return c.halt()
}
