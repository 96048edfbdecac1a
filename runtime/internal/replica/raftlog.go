package replica

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger passes raft's log lines to the node's logger. raft reports
// every election and rejected vote at Info: those go to Debug, its warnings
// to Info, so that a healthy cluster's log stays quiet.
type raftLogger struct {
	l     *slog.Logger
	attrs []any
}

func (r raftLogger) log(level slog.Level, msg string) {
	r.l.Log(context.Background(), level, "ffgen: raft: "+msg, r.attrs...)
}

func (r raftLogger) Debug(v ...any) { r.log(slog.LevelDebug, fmt.Sprint(v...)) }
func (r raftLogger) Debugf(format string, v ...any) {
	r.log(slog.LevelDebug, fmt.Sprintf(format, v...))
}
func (r raftLogger) Info(v ...any)                 { r.log(slog.LevelDebug, fmt.Sprint(v...)) }
func (r raftLogger) Infof(format string, v ...any) { r.log(slog.LevelDebug, fmt.Sprintf(format, v...)) }
func (r raftLogger) Warning(v ...any)              { r.log(slog.LevelInfo, fmt.Sprint(v...)) }
func (r raftLogger) Warningf(format string, v ...any) {
	r.log(slog.LevelInfo, fmt.Sprintf(format, v...))
}
func (r raftLogger) Error(v ...any) { r.log(slog.LevelError, fmt.Sprint(v...)) }
func (r raftLogger) Errorf(format string, v ...any) {
	r.log(slog.LevelError, fmt.Sprintf(format, v...))
}

// Fatal and Panic mean raft found its own state broken: nothing is safe
// to do but stop.
func (r raftLogger) Fatal(v ...any) { r.Panic(v...) }
func (r raftLogger) Fatalf(format string, v ...any) {
	r.Panicf(format, v...)
}
func (r raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	r.log(slog.LevelError, s)
	panic(s)
}
func (r raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	r.log(slog.LevelError, s)
	panic(s)
}
