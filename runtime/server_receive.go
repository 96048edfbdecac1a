package runtime

import (
	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/transport"
)

// serverHandler receives the frames of the connections clients open to the
// server. It is a type of its own, as clientHandler is, so that the
// transport's callbacks are not part of Server's API.
type serverHandler Server

func (h *serverHandler) HandleFrame(c transport.Conn, f frame.Frame) {
	(*Server)(h).handleFrame(c, f)
}

func (h *serverHandler) HandleBatchEnd() { (*Server)(h).flushReplicas() }

func (h *serverHandler) HandleClose(c transport.Conn, err error) {
	(*Server)(h).handleClose(c, err)
}
