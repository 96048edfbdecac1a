package cluster

import (
	"sync"

	"github.com/ffgen/ffgen/runtime"
)

// subscriber runs one Subscribe callback on its own goroutine. Changes
// coalesce: the callback always gets the latest live set, never a backlog.
type subscriber struct {
	fn      func([]runtime.Member)
	pending chan struct{}
	done    chan struct{}
	once    sync.Once
}

func (s *subscriber) wake() {
	select {
	case s.pending <- struct{}{}:
	default:
	}
}

func (s *subscriber) cancel() { s.once.Do(func() { close(s.done) }) }

// run calls fn with members() after every wake until cancelled.
func (s *subscriber) run(members func() []runtime.Member) {
	for {
		select {
		case <-s.done:
			return
		case <-s.pending:
		}
		select {
		case <-s.done:
			return
		default:
		}
		s.fn(members())
	}
}

// Subscribe calls fn with the live members now, before returning, and then
// on its own goroutine after every change of the live set or of a member's
// metadata, one call at a time. A call in progress when cancel is called
// may still finish; none starts after it.
func (c *Cluster) Subscribe(fn func(members []runtime.Member)) (cancel func()) {
	s := &subscriber{fn: fn, pending: make(chan struct{}, 1), done: make(chan struct{})}
	c.mu.Lock()
	active := c.subs != nil
	if active {
		c.subs[s] = struct{}{}
	}
	c.mu.Unlock()
	fn(c.Members())
	if !active {
		return func() {}
	}
	go s.run(c.Members)
	return func() {
		c.mu.Lock()
		delete(c.subs, s)
		c.mu.Unlock()
		s.cancel()
	}
}
