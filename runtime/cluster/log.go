package cluster

import (
	"context"
	"log/slog"
	"strings"
)

// logWriter routes memberlist's log lines ("[LEVEL] memberlist: text")
// into slog: errors as warnings, everything else at debug level.
//
// It also turns the line memberlist writes when this node's probe of a peer
// fails into the suspect state: memberlist exposes no suspicion event, and
// reading the state of the nodes it returns races with its own updates.
type logWriter struct {
	log     *slog.Logger
	suspect func(name string)
}

const (
	suspectPrefix = "Suspect "
	suspectSuffix = " has failed, no acks received"
)

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	level := slog.LevelDebug
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, text, ok := strings.Cut(rest, "] "); ok {
			if tag == "ERR" || tag == "ERROR" {
				level = slog.LevelWarn
			}
			line = text
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if name, ok := strings.CutPrefix(line, suspectPrefix); ok {
		if name, ok := strings.CutSuffix(name, suspectSuffix); ok {
			w.suspect(name)
		}
	}
	ctx := context.Background()
	if w.log.Enabled(ctx, level) {
		w.log.Log(ctx, level, line, "component", "memberlist")
	}
	return len(p), nil
}
