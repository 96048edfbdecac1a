package runtime

import (
	"time"

	"github.com/ffgen/ffgen/runtime/transport"
)

// clientHandler receives the frames of the client's connections.
type clientHandler Client

func (h *clientHandler) HandleFrame(conn transport.Conn, f transport.Frame) {
	c := (*Client)(h)
	c.heardFrom(conn)
	switch f := f.(type) {
	case *transport.Ack:
		c.mu.Lock()
		if l := c.legs[f.Call]; l != nil && l.conn == conn {
			l.beat.Store(time.Now().UnixNano())
			l.acked.Store(true)
		}
		c.mu.Unlock()
	case *transport.Heartbeat:
		now := time.Now().UnixNano()
		c.mu.Lock()
		for _, it := range f.Items {
			l := c.legs[it.Call]
			if l == nil || l.conn != conn {
				continue
			}
			// No wakeup per heartbeat: the waiter reads the time when
			// its timer fires, so 10,000 attempts cost a map lookup and
			// a store each.
			l.beat.Store(now)
			l.acked.Store(true)
			if it.Progress != nil {
				p := append([]byte(nil), it.Progress...)
				l.latest.Store(&p)
			}
		}
		c.mu.Unlock()
	case *transport.Result:
		c.deliver(conn, f.Call, legEvent{conn: conn, result: ownResult(f)})
	case *transport.Redirect:
		rd := *f
		c.deliver(conn, f.Call, legEvent{conn: conn, redirect: &rd})
	default:
		c.cfg.Logger.Debug("ffgen: client ignores frame", "type", f.Type(), "peer", conn.Peer().Node)
	}
}

func (h *clientHandler) HandleClose(conn transport.Conn, err error) {
	c := (*Client)(h)
	if err == nil {
		err = transport.ErrClosed
	}
	c.mu.Lock()
	for _, l := range c.legs {
		if l.conn != conn {
			continue
		}
		select {
		case l.done <- legEvent{conn: conn, err: err}:
		default:
		}
	}
	c.mu.Unlock()
}

// resultBox holds a copied Result and, when it fits, its payload: one
// allocation for the common small answer instead of two.
type resultBox struct {
	r      transport.Result
	inline [64]byte
}

// ownResult copies f out of the connection's read buffer.
func ownResult(f *transport.Result) *transport.Result {
	b := &resultBox{r: *f}
	if len(f.Payload) <= len(b.inline) {
		b.r.Payload = append(b.inline[:0:len(b.inline)], f.Payload...)
	} else {
		b.r.Payload = append([]byte(nil), f.Payload...)
	}
	return &b.r
}

func (c *Client) deliver(conn transport.Conn, call uint64, ev legEvent) {
	c.mu.Lock()
	l := c.legs[call]
	if l == nil || l.conn != conn {
		c.mu.Unlock()
		return // a leg we stopped waiting for
	}
	l.acked.Store(true)
	// Sent under the lock, so a waiter that gives up (and forgets the
	// leg, also under the lock) either sees this event or is seen.
	select {
	case l.done <- ev:
	default:
	}
	c.mu.Unlock()
}
