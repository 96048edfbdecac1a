package runtime

import (
	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/transport"
)

// clientHandler receives the frames of the client's connections.
type clientHandler Client

func (h *clientHandler) HandleFrame(conn transport.Conn, f frame.Frame) {
	c := (*Client)(h)
	c.heardFrom(conn)
	now := conncap.ReceivedAt(conn).UnixNano()
	w := c.legs.watchOf(conn)
	if w != nil {
		w.frame.Store(now) // busy is not dead (leg.lastBeat)
	}
	switch f := f.(type) {
	case *frame.Ack:
		c.legs.ack(conn, f.Call, now)
	case *frame.Heartbeat:
		if w != nil {
			w.vouched.Store(f.All)
			w.late.Store(int64(f.Late))
			if f.All {
				w.beat.Store(now)
			}
		}
		c.legs.beat(conn, f.Items, now)
	case *frame.Result:
		c.legs.deliverResult(conn, f)
	case *frame.Redirect:
		rd := *f
		c.legs.deliver(conn, f.Call, legEvent{conn: conn, redirect: &rd})
	default:
		c.cfg.Logger.Debug("ffgen: client ignores frame", "type", f.Type(), "peer", conn.Peer().Node)
	}
}

func (h *clientHandler) HandleClose(conn transport.Conn, err error) {
	c := (*Client)(h)
	if err == nil {
		err = transport.ErrClosed
	}
	c.legs.broke(conn, err)
}

// resultBox holds a Result copied out of the connection's read buffer and,
// when it fits, its payload: no allocation for the common small answer.
type resultBox struct {
	r      frame.Result
	inline [64]byte
}

// own copies f into b.
func (b *resultBox) own(f *frame.Result) *frame.Result {
	b.r = *f
	if len(f.Payload) <= len(b.inline) {
		b.r.Payload = append(b.inline[:0:len(b.inline)], f.Payload...)
	} else {
		b.r.Payload = append([]byte(nil), f.Payload...)
	}
	return &b.r
}
