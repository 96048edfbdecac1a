package cluster

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/ffgen/ffgen/internal/testkit"
)

// A logger that already names its node, as a node's logger does, gets no
// second node attribute from the cluster.
func TestLoggerNodeAttributeOnce(t *testing.T) {
	var buf testkit.LogBuffer
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
