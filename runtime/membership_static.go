package runtime

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// StaticMembership is a Membership whose view is set by hand: for tests
// and for fixed deployments. Subscribers are called synchronously by
// Subscribe and by every change, so it works inside a testing/synctest
// bubble without goroutines of its own. It is safe for concurrent use.
type StaticMembership struct {
	// notify serializes changes with their notifications, so every
	// subscriber sees each view once, in order, one call at a time.
	notify sync.Mutex

	mu      sync.Mutex // guards members and subs
	members []Member
	subs    []*staticSub // in subscription order
}

type staticSub struct {
	fn        func([]Member)
	cancelled atomic.Bool
}

var _ Membership = (*StaticMembership)(nil)

// NewStaticMembership returns a membership whose view is members.
func NewStaticMembership(members ...Member) *StaticMembership {
	return &StaticMembership{members: cloneMembers(members)}
}

// cloneMembers copies the members, their service lists and method maps, so the view
// cannot change behind the subscribers' backs.
func cloneMembers(members []Member) []Member {
	out := make([]Member, len(members))
	for i, m := range members {
		m.Services = slices.Clone(m.Services)
		m.Methods = maps.Clone(m.Methods)
		out[i] = m
	}
	return out
}

// Members returns the current view. The caller must not modify it.
func (s *StaticMembership) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members
}

// Subscribe calls fn with the current view before it returns, and again
// with the full view after every change, until cancel is called. Calls
// never overlap and come in the order of the changes. fn must not change
// the membership or subscribe to it (it would deadlock); it may call
// cancel. After cancel returns fn is not called again, except for a call
// already under way on another goroutine.
func (s *StaticMembership) Subscribe(fn func(members []Member)) (cancel func()) {
	s.notify.Lock()
	defer s.notify.Unlock()
	sub := &staticSub{fn: fn}
	s.mu.Lock()
	s.subs = append(s.subs, sub)
	members := s.members
	s.mu.Unlock()
	fn(members)
	return func() {
		sub.cancelled.Store(true)
		s.mu.Lock()
		s.subs = slices.DeleteFunc(s.subs, func(o *staticSub) bool { return o == sub })
		s.mu.Unlock()
	}
}

// Set replaces the view with a copy of members and notifies every
// subscriber before it returns.
func (s *StaticMembership) Set(members []Member) {
	members = cloneMembers(members)
	s.change(func([]Member) []Member { return members })
}

// Add adds members, replacing any current member of the same name, and
// notifies the subscribers.
func (s *StaticMembership) Add(members ...Member) {
	added := cloneMembers(members)
	s.change(func(old []Member) []Member {
		out := slices.DeleteFunc(slices.Clone(old), func(o Member) bool {
			return slices.ContainsFunc(added, func(a Member) bool { return a.Name == o.Name })
		})
		return append(out, added...)
	})
}

// Remove removes the members with the given names and notifies the
// subscribers.
func (s *StaticMembership) Remove(names ...string) {
	s.change(func(old []Member) []Member {
		return slices.DeleteFunc(slices.Clone(old), func(o Member) bool {
			return slices.Contains(names, o.Name)
		})
	})
}

// change publishes next(current view) and notifies the subscribers in
// subscription order.
func (s *StaticMembership) change(next func(old []Member) []Member) {
	s.notify.Lock()
	defer s.notify.Unlock()
	s.mu.Lock()
	members := next(s.members)
	s.members = members
	calls := slices.Clone(s.subs)
	s.mu.Unlock()
	for _, sub := range calls {
		if !sub.cancelled.Load() {
			sub.fn(members)
		}
	}
}
