package transport

import (
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"time"
)

// Defaults for the pacing of new connections.
const (
	DefaultMaxHandshakes = 64
	DefaultHandshakeWait = 100 * time.Millisecond
)

// handshakeSlots bounds the connections of one node that are in their TLS
// and Hello exchange. A storm of new connections would otherwise start a
// goroutine pair, a buffer and a handful of system calls for each of them
// within milliseconds, and the node's established connections, whose
// goroutines share the run queues with all of those, would wait their
// turn: with a bound, a storm costs the node at most that many handshakes
// at a time, however fast connections arrive.
type handshakeSlots struct {
	free   chan struct{} // one token per free slot; nil: no limit
	active atomic.Int64  // handshakes in progress
}

func newHandshakeSlots(n int) *handshakeSlots {
	s := &handshakeSlots{}
	if n > 0 {
		s.free = make(chan struct{}, n)
		for range n {
			s.free <- struct{}{}
		}
	}
	return s
}

// take takes a free slot's token if there is one. The accept loop takes
// it before the connection it is for has arrived.
func (s *handshakeSlots) take() bool {
	if s.free == nil {
		return true
	}
	select {
	case <-s.free:
		return true
	default:
		return false
	}
}

// put gives a token back.
func (s *handshakeSlots) put() {
	if s.free != nil {
		s.free <- struct{}{}
	}
}

// begin counts a handshake that starts with a taken token; end counts it
// done and gives the token back.
func (s *handshakeSlots) begin() { s.active.Add(1) }

func (s *handshakeSlots) end() {
	s.active.Add(-1)
	s.put()
}

// pacer decides, for one accept loop, whether the next connection gets a
// handshake slot. While every slot is taken it stops accepting, so that
// new connections wait in the kernel's backlog, costing the node nothing:
// an honest burst a little larger than the bound (peers reconnecting after
// a restart) waits there for milliseconds. If no slot frees within the
// wait, the slots are held by connections that take their time, as a
// flood of connections that never send a Hello does for the whole
// handshake timeout; the pacer then sheds, accepting and closing at once
// every connection that finds no free slot, until one frees. Shedding
// drains the backlog, whose connections would otherwise hold kernel
// buffers and age there past their dialers' timeouts, and tells their
// dialers at once.
//
// Before a slot, a connection takes a token of the node's accept rate
// (acceptBucket): beyond the rate, accepting waits, and the connections
// wait in the backlog as they do for a slot. Only when they keep arriving
// faster than the rate for rateShedAfter does the pacer shed the backlog,
// and from then on every connection that finds no token, until one finds
// a token to spare.
//
// A pacer has no lock: its listener's accept loop owns it.
type pacer struct {
	slots    *handshakeSlots
	wait     time.Duration
	rate     *acceptBucket // nil: no limit
	g        *guard
	addr     string // the listener's, for the log
	done     <-chan struct{}
	shed     *shedder // nil where connections cannot be shed unaccepted
	timer    *time.Timer
	shedding bool
	// token: a token of the rate is held for the next connection; behind:
	// since when every token was found taken; rateShedding: connections
	// beyond the rate are shed.
	token        bool
	behind       time.Time
	rateShedding bool
}

// before is called before each Accept. It reports whether a slot was
// taken for the next connection, and false for stop when done closed.
func (p *pacer) before() (slot, stop bool) {
	if p.beforeRate() {
		return false, true
	}
	if p.shedding {
		return p.shedAll(), false
	}
	if p.slots.take() {
		return true, false
	}
	p.g.pacedAccept(p.addr)
	p.armTimer(p.wait)
	select {
	case <-p.slots.free:
		p.timer.Stop()
		return true, false
	case <-p.timer.C:
		p.shedding = true
		return p.shedAll(), false
	case <-p.done:
		p.timer.Stop()
		return false, true
	}
}

// beforeRate takes a token of the accept rate for the next connection,
// waiting for one, unless connections have come faster than the rate for
// rateShedAfter: then it sheds the backlog instead. It reports true when
// done closed.
func (p *pacer) beforeRate() (stop bool) {
	if p.token {
		return false // kept from an Accept that failed
	}
	ok, wait := p.rate.take()
	if ok {
		// A token to spare: connections come no faster than the rate.
		p.token, p.behind, p.rateShedding = true, time.Time{}, false
		return false
	}
	if p.behind.IsZero() {
		p.behind = time.Now()
	}
	if time.Since(p.behind) >= rateShedAfter {
		p.rateShedding = true
	}
	if p.rateShedding {
		p.token = p.shed != nil && p.shed.drain(p.rate.takeNow, p.refuseRate)
		return false
	}
	p.g.pacedRate(p.addr)
	for !ok {
		p.armTimer(wait)
		select {
		case <-p.timer.C:
		case <-p.done:
			p.timer.Stop()
			return true
		}
		ok, wait = p.rate.take()
	}
	p.token = true
	return false
}

func (p *pacer) armTimer(d time.Duration) {
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
}

// shedAll sheds the connections waiting in the backlog straight from the
// listening socket, where the platform allows, until a slot is free when
// one comes up; it reports whether it took that slot. Connections that
// arrive later go through Accept and after.
func (p *pacer) shedAll() bool {
	if p.shed != nil && p.shed.drain(p.slots.take, p.refuse) {
		p.shedding = false
		return true
	}
	return false
}

// after is called with each accepted connection and whether before took a
// slot for it. It reports whether the connection has a slot; one without
// is refused, and closed by the caller before anything is read from it;
// so is one past the accept rate while the pacer sheds.
func (p *pacer) after(nc net.Conn, slot bool) bool {
	if !p.token && !p.rate.takeNow() {
		if slot {
			p.slots.put()
		}
		p.refuseRate(nc.RemoteAddr().String())
		return false
	}
	p.token = false
	if slot {
		return true
	}
	if p.slots.take() {
		p.shedding = false
		return true
	}
	p.refuse(nc.RemoteAddr().String())
	return false
}

// refuse counts and logs a connection shed. It then lets other goroutines
// run: a storm can keep the accept loop busy for as long as it lasts, and
// the established connections' goroutines must not wait behind it.
func (p *pacer) refuse(addr string) {
	p.g.refuse(refusedHandshakeLimit, addr, "",
		fmt.Errorf("%w: %d handshakes in progress for %v, limit %d (TCPConfig.MaxHandshakes)",
			ErrOverloaded, p.slots.active.Load(), p.wait, cap(p.slots.free)))
	runtime.Gosched()
}

// refuseRate counts and logs a connection shed beyond the accept rate,
// and lets other goroutines run, as refuse does.
func (p *pacer) refuseRate(addr string) {
	p.g.refuse(refusedAcceptRate, addr, "",
		fmt.Errorf("%w: new connections have come faster than %v a second for %v (TCPConfig.AcceptRate)",
			ErrOverloaded, p.rate.rate, rateShedAfter))
	runtime.Gosched()
}
