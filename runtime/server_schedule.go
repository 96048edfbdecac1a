package runtime

import (
	"time"

	"github.com/ffgen/ffgen/internal/frame"
)

// Entity scheduling. Every operation is queued, at arrival, on each of its
// entities; it runs when it heads all of those queues, so each entity sees
// operations in arrival order on every node, multi-entity ones included.
// A hold operation is not queued while its entity is busy: it waits aside and
// is queued when the entity goes idle, so later operations may overtake it.
// The queues belong to the server, not to a handler goroutine, which is why a
// panicking handler cannot lose a held operation.

// entityQueue is one busy entity's operations. s.mu guards it.
type entityQueue struct {
	queue []*execution // queue[0] runs or waits for its other entities
	held  []*execution // hold operations waiting for the entity to go idle
}

// schedule queues or holds e; one that heads all its queues starts on a
// worker. Called with s.mu held.
func (s *Server) schedule(e *execution) {
	if s.enqueue(e) {
		s.start(e)
	}
}

// enqueue queues or holds e, and reports whether it started at once: the
// caller then runs its handler, on a worker (start) or on a goroutine it
// has at hand (a connection's reader, the replicated log's apply
// goroutine). Called with s.mu held.
func (s *Server) enqueue(e *execution) bool {
	e.queues = nil
	if e.hold {
		for _, id := range e.entities {
			if q := s.entities[id]; q != nil && len(q.queue) > 0 {
				e.fire(evHold)
				q.held = append(q.held, e)
				return false
			}
		}
	}
	e.fire(evQueue)
	e.queues = e.queueBuf[:0]
	for _, id := range e.entities {
		q := s.entities[id]
		if q == nil {
			q = s.newQueue()
			s.entities[id] = q
		}
		q.queue = append(q.queue, e)
		e.queues = append(e.queues, q)
	}
	return s.ready(e)
}

// queue returns the queue of e's i-th entity, id: the one e is queued in,
// or, for one that is not (held), the entity's queue now, if any. Called
// with s.mu held.
func (s *Server) queue(e *execution, i int, id string) *entityQueue {
	if e.queues != nil {
		return e.queues[i]
	}
	return s.entities[id]
}

// newQueue reuses an idle entity's queue: most entities are busy briefly,
// and recycling spares two allocations per operation. Called with s.mu held.
func (s *Server) newQueue() *entityQueue {
	if n := len(s.freeQueues); n > 0 {
		q := s.freeQueues[n-1]
		s.freeQueues = s.freeQueues[:n-1]
		return q
	}
	return &entityQueue{}
}

// dropQueue forgets entity id's queue, now empty. Called with s.mu held.
func (s *Server) dropQueue(id string, q *entityQueue) {
	delete(s.entities, id)
	if len(s.freeQueues) < maxFreeQueues && cap(q.queue) <= 8 {
		q.queue = q.queue[:0]
		q.held = nil
		s.freeQueues = append(s.freeQueues, q)
	}
}

const maxFreeQueues = 1024

// tryStart starts e on a worker if it heads every one of its queues.
// Called with s.mu held.
func (s *Server) tryStart(e *execution) {
	if s.ready(e) {
		s.start(e)
	}
}

// ready moves e to running if it heads every one of its queues, and
// reports whether it did: its handler is then the caller's to run. One
// whose time ran out while it waited, or that the server halted, ends
// there without running; a scatter copy's time starts only when it runs.
// Called with s.mu held.
func (s *Server) ready(e *execution) bool {
	if e.state != stateQueued {
		return false
	}
	for i, id := range e.entities {
		if q := s.queue(e, i, id); q == nil || len(q.queue) == 0 || q.queue[0] != e {
			return false
		}
	}
	// A caller waits for e unless it is a copy of a replicated write
	// that a follower applies: then how long e waited is the node's
	// queueing delay (a hold operation waits aside on purpose).
	waited := len(e.waiters) > 0 && !e.hold
	var now time.Time
	if waited || !e.scatter {
		now = time.Now()
	}
	if s.halted || (!e.scatter && !now.Before(e.expires())) {
		s.expire(e, "attempt cancelled or expired before it ran")
		return false
	}
	e.fire(evStart)
	if waited {
		s.delay.started(now, now.Sub(e.arrived))
	}
	s.running.Add(1)
	return true
}

// expire ends e, queued or held, without running it: every waiter hears
// that it never started. The result is its own, not e.res, which belongs
// to the handler's goroutine. Called with s.mu held.
func (s *Server) expire(e *execution, why string) {
	e.fire(evExpire)
	res := notStarted(why)
	s.countRefusal(e.sm, e.method.Service, e.method.Name, res.Code)
	answerWaiters(e.end(&res, nil), &res, nil)
}

// notStarted is the answer to an attempt that ended here before its
// handler started.
func notStarted(why string) frame.Result {
	return frame.Result{Status: frame.StatusFailover, Code: codeNotStarted, Message: why}
}

// release takes e off its queues, wherever it stands (a finished operation
// heads them; an expired one may be anywhere, or held), and starts what may
// run next. Called with s.mu held.
func (s *Server) release(e *execution) {
	var next []*execution
	for i, id := range e.entities {
		q := s.queue(e, i, id)
		if q == nil {
			continue
		}
		q.queue = without(q.queue, e)
		q.held = without(q.held, e)
		switch {
		case len(q.queue) > 0:
			next = append(next, q.queue[0])
		case len(q.held) > 0:
			held := q.held
			q.held = nil
			s.dropQueue(id, q)
			next = append(next, held...)
		default:
			s.dropQueue(id, q)
		}
	}
	e.queues = nil // a queue dropped here may serve another entity next
	for _, n := range next {
		if n.state == stateHeld {
			s.schedule(n)
		} else {
			s.tryStart(n)
		}
	}
}

// without removes e from list in place, keeping the order and the backing
// array (recycled queues keep their capacity); lists are short.
func without(list []*execution, e *execution) []*execution {
	for i, x := range list {
		if x == e {
			n := copy(list[i:], list[i+1:])
			list[i+n] = nil
			return list[:i+n]
		}
	}
	return list
}
