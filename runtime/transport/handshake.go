package transport

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"

	"github.com/ffgen/ffgen/internal/frame"
)

// handshake exchanges Hello frames on nc within timeout and returns the
// peer's Hello and the reader to continue with (it may already hold frames
// the peer sent right after its Hello). Both sides write before reading, so
// the write runs beside the read: on an unbuffered conn neither would finish
// alone. g, if not nil, is charged for the reader's buffer.
func handshake(nc net.Conn, cfg Config, timeout time.Duration, g *guard) (frame.Hello, *frameReader, error) {
	if timeout > 0 {
		if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
			return frame.Hello{}, nil, err
		}
	}
	out, err := frame.Append(nil, hello(cfg, frame.Caps), cfg.MaxFrameSize)
	if err != nil {
		return frame.Hello{}, nil, err
	}
	written := make(chan error, 1)
	// The hello writer: it owns nc's write side until it sends on written.
	go writeHello(nc, out, written)

	fr := newFrameReader(nc, cfg.MaxFrameSize, g)
	peer, rerr := readHello(fr)
	if rerr != nil {
		// Unblock the writer before waiting for it.
		nc.SetDeadline(time.Unix(1, 0))
	}
	werr := <-written
	switch {
	case rerr != nil:
		fr.release()
		return frame.Hello{}, nil, rerr
	case werr != nil:
		fr.release()
		return frame.Hello{}, nil, werr
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		fr.release()
		return frame.Hello{}, nil, err
	}
	return peer, fr, nil
}

// hello is the Hello this node sends, announcing caps.
func hello(cfg Config, caps uint64) *frame.Hello {
	return &frame.Hello{Version: frame.Version, Node: cfg.Node, Group: cfg.Group, MaxFrame: uint32(cfg.MaxFrameSize), Revision: frame.Revision, Caps: caps}
}

// writeHello is the handshake's hello writer: it writes out to nc and
// reports how that went on written.
func writeHello(nc net.Conn, out []byte, written chan<- error) {
	_, err := nc.Write(out)
	written <- err
}

// readHello reads the peer's Hello, the first frame of the connection, and
// names what the peer speaks when it is not this protocol.
func readHello(fr *frameReader) (frame.Hello, error) {
	p, err := fr.next()
	if err != nil {
		if fr.looksLikeTLS() {
			return frame.Hello{}, fmt.Errorf("%w: the peer speaks TLS and this side does not: configure TLS on both ends or on neither", ErrTLS)
		}
		if line, ok := fr.httpAnswer(); ok {
			return frame.Hello{}, fmt.Errorf("%w: it answers in HTTP (%q): it is an HTTP port, such as a node's management address; "+
				"give the node's RPC address (the one its server listens on, cluster.Config.RPCAddr)", ErrNotRPC, line)
		}
		return frame.Hello{}, err
	}
	f, err := frame.Decode(p)
	if err != nil {
		return frame.Hello{}, helloError(p, err)
	}
	h, ok := f.(*frame.Hello)
	if !ok {
		return frame.Hello{}, fmt.Errorf("%w: first frame is %s, want hello", ErrMalformedFrame, f.Type())
	}
	if h.Version < frame.Version {
		return frame.Hello{}, fmt.Errorf("%w: %s, this node %d revision %d", ErrBadVersion, h, frame.Version, frame.Revision)
	}
	if h.Caps&frame.CapAtLimit != 0 {
		return frame.Hello{}, fmt.Errorf("%w (peer %q)", ErrAtLimit, h.Node)
	}
	return *h, nil
}

// helloError names what the peer speaks when its Hello cannot be decoded:
// a Hello of another protocol version still starts with the version and
// the sender's name, whatever follows.
func helloError(p []byte, err error) error {
	if len(p) < 2 || frame.Type(p[1]) != frame.TypeHello {
		return err
	}
	r := codec.NewReader(p[2:])
	h := frame.Hello{Version: r.Byte(), Node: r.String()}
	if r.Err() != nil {
		return err
	}
	_ = r.String() // the group
	if r.Len() > 0 {
		r.Uvarint() // the frame limit
	}
	if r.Len() > 0 {
		h.Revision = uint32(r.Uvarint())
	}
	return fmt.Errorf("%s, this node %d revision %d, and it cannot read the peer's hello: %w", &h, frame.Version, frame.Revision, err)
}

// looksLikeTLS reports whether the bytes received so far start a TLS
// record (a handshake or an alert, version 3.x): a length prefix that a
// TLS peer sent by mistake reads as a frame of hundreds of megabytes.
func (r *frameReader) looksLikeTLS() bool {
	b := r.buf[r.r:r.w]
	return len(b) >= 2 && (b[0] == 0x16 || b[0] == 0x15) && b[1] == 0x03
}

// httpAnswer returns the first line of what was received so far if it is
// an HTTP answer: "HTTP/1.1 400 Bad Request" read as a length prefix is a
// frame of over a gigabyte, refused as soon as four bytes are in.
func (r *frameReader) httpAnswer() (string, bool) {
	b := r.buf[r.r:r.w]
	if !bytes.HasPrefix(b, []byte("HTTP")) {
		return "", false
	}
	line, _, _ := bytes.Cut(b[:min(len(b), 80)], []byte("\r\n"))
	return string(line), true
}
