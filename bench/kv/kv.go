// Package kv is the replicated service bench-compare writes to through
// ffgen: one replicated write that stores a value under a key, the same
// work as an etcd Put, and a snapshot of the whole map so that the log is
// compacted as etcd's is.
package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"sync"
)

//go:generate go tool ffgen

// KV is a replicated map.
//
//ff:service
type KV interface {
	// Put stores value under key on every replica.
	//
	//ff:entity key
	//ff:scatter
	Put(ctx context.Context, key string, value []byte) error
}

// Server implements KV and runtime.StateTransfer.
type Server struct {
	mu sync.Mutex
	// mu guards the following.
	m map[string][]byte
}

// NewServer returns an empty map.
func NewServer() *Server { return &Server{m: map[string][]byte{}} }

// Put stores a copy of value under key.
func (s *Server) Put(_ context.Context, key string, value []byte) error {
	v := bytes.Clone(value)
	s.mu.Lock()
	s.m[key] = v
	s.mu.Unlock()
	return nil
}

// Len is the number of keys stored.
func (s *Server) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// SnapshotState encodes the map: each key and value with its length
// before it, keys in order.
func (s *Server) SnapshotState() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(s.m)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(s.m[k])))
		b = append(b, s.m[k]...)
	}
	return b, nil
}

// RestoreState replaces the map with a snapshot's.
func (s *Server) RestoreState(b []byte) error {
	m := map[string][]byte{}
	for len(b) > 0 {
		k, rest, err := field(b)
		if err != nil {
			return err
		}
		v, rest, err := field(rest)
		if err != nil {
			return err
		}
		m[string(k)] = bytes.Clone(v)
		b = rest
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
	return nil
}

var errSnapshot = errors.New("kv: malformed snapshot")

// field splits a length-prefixed field off b.
func field(b []byte) (f, rest []byte, err error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, nil, errSnapshot
	}
	return b[w : w+int(n)], b[w+int(n):], nil
}
