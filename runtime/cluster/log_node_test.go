package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A logger that already names its node, as a node's logger does, gets no
// second node attribute from the cluster.
func TestLoggerNodeAttributeOnce(t *testing.T) {
	var buf lockedBuffer
	lg := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", "n0")
	startNode(t, "n0", "g0", func(cfg *Config) { cfg.Logger = lg })
	out := buf.String()
	if out == "" {
		t.Fatal("the cluster logged nothing at debug level on start")
	}
	for line := range strings.Lines(out) {
		if n := strings.Count(line, "node="); n != 1 {
			t.Errorf("%d node attributes in %q", n, line)
		}
	}
}
