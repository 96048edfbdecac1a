// Package echo is the service bench-compare calls through ffgen: one
// method that returns its payload, the same work every compared system
// does, and one that holds an operation open for the in-flight phase.
package echo

import (
	"context"
	"sync/atomic"
	"time"
)

//go:generate go tool ffgen

// Echo answers with what it is sent.
//
//ff:service
type Echo interface {
	// Echo returns payload.
	//
	//ff:entity key
	Echo(ctx context.Context, key string, payload []byte) ([]byte, error)

	// Hold returns after d, or when ctx ends: a long operation, kept in
	// flight while other calls are measured.
	//
	//ff:entity key
	//ff:timeout attempt=5m operation=5m
	Hold(ctx context.Context, key string, d time.Duration) error
}

// Server implements Echo.
type Server struct {
	held atomic.Int64
}

// Held is the number of Hold calls running.
func (s *Server) Held() int64 { return s.held.Load() }

// Echo returns payload.
func (*Server) Echo(_ context.Context, _ string, payload []byte) ([]byte, error) {
	return payload, nil
}

// Hold returns after d, or when ctx ends.
func (s *Server) Hold(ctx context.Context, _ string, d time.Duration) error {
	s.held.Add(1)
	defer s.held.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
