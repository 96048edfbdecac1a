package replica

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog passes what etcd's WAL and snapshot packages log (they log
// with zap: a segment repaired, a broken snapshot set aside, a slow
// fdatasync) to the node's logger. Their Info lines go to Debug, as raft's
// do (raftLogger), so that a healthy node's log stays quiet.
func zapToSlog(l *slog.Logger) *zap.Logger {
	return zap.New(slogCore{l: l})
}

type slogCore struct {
	l      *slog.Logger
	fields []zapcore.Field
}

func (c slogCore) Enabled(zapcore.Level) bool { return true }

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{l: c.l, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.l.Enabled(context.Background(), slogLevel(e.Level)) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	c.l.Log(context.Background(), slogLevel(e.Level), "ffgen: storage: "+e.Message, attrs...)
	return nil
}

func (c slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.InfoLevel:
		return slog.LevelDebug
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
