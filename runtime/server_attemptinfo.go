package runtime

import (
	"context"
	"encoding/hex"
	"sync"
	"sync/atomic"

	"github.com/ffgen/ffgen/runtime/metadata"
)

// PriorAttempt is an earlier attempt of the operation, as the handler sees it.
type PriorAttempt struct {
	Node, Group string
	Reason      Reason
}

// AttemptInfo is what a handler knows about the attempt it runs.
type AttemptInfo struct {
	OpID     [16]byte
	Number   int            // 0 for the first attempt
	Entities []string       // the first routes
	Caller   string         // the client's node name
	History  []PriorAttempt // why the earlier attempts ended, oldest first
	Progress []byte         // the last progress an earlier attempt reported, if any

	exec *execution
	md   metadata.MD // the call's metadata, served by the handler's context
}

// OpIDString returns the operation ID in hex; handlers use it as an
// idempotency key.
func (a *AttemptInfo) OpIDString() string { return hex.EncodeToString(a.OpID[:]) }

type attemptKey struct{}

// AttemptFrom returns the attempt a handler runs, or nil outside a handler.
func AttemptFrom(ctx context.Context) *AttemptInfo {
	a, _ := ctx.Value(attemptKey{}).(*AttemptInfo)
	return a
}

// ReportProgress attaches p to the attempt's next heartbeat. If the attempt
// fails over, the next attempt receives the last progress the client saw in
// AttemptInfo.Progress, so it can resume instead of starting over. It is a
// no-op outside a handler.
func ReportProgress(ctx context.Context, p []byte) {
	a := AttemptFrom(ctx)
	if a == nil || a.exec == nil {
		return
	}
	a.exec.setProgress(p)
}

// progressCell holds the latest progress of an execution. Each connection
// that heartbeats the execution remembers the version it last sent, so
// progress goes out once per waiter, and a lost frame is repaired by the
// next change.
type progressCell struct {
	mu      sync.Mutex // guards value, and version's changes
	value   []byte
	version atomic.Uint64 // read without the lock on every heartbeat
}

func (c *progressCell) set(p []byte) {
	v := append([]byte(nil), p...) // a new slice: readers keep the old one safely
	c.mu.Lock()
	c.value = v
	c.version.Add(1)
	c.mu.Unlock()
}

// since returns the progress if its version is newer than seen, and the
// current version.
func (c *progressCell) since(seen uint64) ([]byte, uint64) {
	if c.version.Load() == seen {
		return nil, seen
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value, c.version.Load()
}
