package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Start finishes a command's setup once the flags are parsed: it returns
// the logger at level and a context cancelled on SIGTERM or SIGINT, or
// prints what is wrong with the level or the environment and exits with
// status 2.
func (f *Flags) Start(level string) (context.Context, context.CancelFunc, *slog.Logger) {
	log, err := f.logger(level)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name(), err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	return ctx, stop, log
}

// logger returns the logger at level, or the level's error, else the
// environment's.
func (f *Flags) logger(level string) (*slog.Logger, error) {
	log, err := Logger(level)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(f.Errs...); err != nil {
		return nil, err
	}
	return log, nil
}
