package testkit

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// bugPrefix starts the message of every record the runtime logs for a bug
// of its own, such as an execution event its state does not allow: a
// node in production logs it and goes on, a test must fail.
const bugPrefix = "ffgen: bug:"

// Logger returns a logger for the servers, clients and transports of a
// test: it discards what it is given, except a record of an engine bug
// (its message starts with "ffgen: bug:"), which fails tb.
func Logger(tb testing.TB) *slog.Logger { return slog.New(bugHandler{tb}) }

type bugHandler struct{ tb testing.TB }

func (h bugHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h bugHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, bugPrefix) {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		h.tb.Errorf("%s", b.String())
	}
	return nil
}

func (h bugHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h bugHandler) WithGroup(string) slog.Handler      { return h }

// LogBuffer collects the text records of loggers on several goroutines,
// for a test that asserts what was logged.
type LogBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Logger returns a logger that writes text records into l.
func (l *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// WaitFor waits until l holds want, and fails tb if it does not within
// Bound.
func (l *LogBuffer) WaitFor(tb testing.TB, want string) {
	tb.Helper()
	if !Within(Bound, func() bool { return strings.Contains(l.String(), want) }) {
		tb.Fatalf("the log never held %q; it holds:\n%s", want, l)
	}
}
