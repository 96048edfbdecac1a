package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
)

// Send encodes into the connection's own buffers: no allocation once they
// have grown.
func TestStreamSendAllocs(t *testing.T) {
	a, b := net.Pipe()
	go io.Copy(io.Discard, b)
	cfg := Config{Logger: discard}.WithDefaults()
	s := newStream(a, newFrameReader(a, cfg.MaxFrameSize, nil), frame.Hello{Node: "peer"}, cfg, newRecorder(), nil, 0, nil)
	defer s.Close()
	hb := &frame.Heartbeat{Items: []frame.HeartbeatItem{{Call: 1}, {Call: 2}}}
	if n := testing.AllocsPerRun(1000, func() {
		if err := s.Send(hb); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Send: %v allocs/op, want 0", n)
	}
}

// pingPayload is the payload of the small frame the ping-pong benchmarks
// bounce; the raw variant sends the same number of bytes.
const pingPayload = 32

// BenchmarkPingPong bounces a small frame over loopback TCP through the
// transport, and the same bytes over plain length-prefixed net.Conns, for
// one stream and for 64 concurrent streams on one connection.
func BenchmarkPingPong(b *testing.B) {
	for _, streams := range []int{1, 64} {
		b.Run(fmt.Sprintf("transport/streams=%d", streams), func(b *testing.B) { benchTransport(b, streams) })
		b.Run(fmt.Sprintf("raw/streams=%d", streams), func(b *testing.B) { benchRaw(b, streams) })
	}
}

// runStreams shares b.N round trips among streams goroutines.
func runStreams(b *testing.B, streams int, roundTrip func(stream int)) {
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for s := range streams {
		n := b.N / streams
		if s < b.N%streams {
			n++
		}
		wg.Go(func() {
			for range n {
				roundTrip(s)
			}
		})
	}
	wg.Wait()
}

type echoHandler struct{}

func (echoHandler) HandleFrame(c Conn, f frame.Frame) { c.Send(f) }
func (echoHandler) HandleClose(Conn, error)           {}

type pongHandler struct{ done []chan struct{} }

func (h *pongHandler) HandleFrame(_ Conn, f frame.Frame) {
	if r, ok := f.(*frame.Result); ok {
		h.done[r.Call] <- struct{}{}
	}
}
func (h *pongHandler) HandleClose(Conn, error) {}

func benchTransport(b *testing.B, streams int) {
	l := listen(b, newTCP(b, "server", nil), echoHandler{})
	h := &pongHandler{done: make([]chan struct{}, streams)}
	frames := make([]*frame.Result, streams)
	for s := range streams {
		h.done[s] = make(chan struct{}, 1)
		frames[s] = &frame.Result{Call: uint64(s), Payload: make([]byte, pingPayload)}
	}
	c, err := newTCP(b, "client", nil).Dial(context.Background(), l.Addr(), h)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	runStreams(b, streams, func(s int) {
		if err := c.Send(frames[s]); err != nil {
			panic(err)
		}
		<-h.done[s]
	})
	b.StopTimer()
	if st := c.(conncap.StatsConn).Stats(); st.FramesSent > 0 {
		b.ReportMetric(float64(st.FramesSent)/float64(st.Writes), "frames/write")
	}
}

// rawFrameLen is the size the transport's ping frame takes on the wire.
var rawFrameLen = func() int {
	b, _ := frame.Append(nil, &frame.Result{Call: 63, Payload: make([]byte, pingPayload)}, 0)
	return len(b)
}()

func benchRaw(b *testing.B, streams int) {
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer nl.Close()
	go func() {
		for {
			nc, err := nl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				buf := make([]byte, rawFrameLen)
				for {
					if _, err := io.ReadFull(br, buf); err != nil {
						return
					}
					if _, err := nc.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	nc, err := net.Dial("tcp", nl.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()

	frames := make([][]byte, streams)
	for s := range frames {
		frames[s] = make([]byte, rawFrameLen)
		binary.BigEndian.PutUint32(frames[s], uint32(rawFrameLen-4))
		binary.BigEndian.PutUint32(frames[s][4:], uint32(s))
	}
	if streams == 1 {
		in := make([]byte, rawFrameLen)
		runStreams(b, 1, func(int) {
			if _, err := nc.Write(frames[0]); err != nil {
				panic(err)
			}
			if _, err := io.ReadFull(nc, in); err != nil {
				panic(err)
			}
		})
		return
	}
	// Many streams need what any multiplexer needs: a lock on writes and
	// a reader that hands each reply to its stream.
	done := make([]chan struct{}, streams)
	for s := range done {
		done[s] = make(chan struct{}, 1)
	}
	go func() {
		br := bufio.NewReader(nc)
		in := make([]byte, rawFrameLen)
		for {
			if _, err := io.ReadFull(br, in); err != nil {
				return
			}
			done[binary.BigEndian.Uint32(in[4:])] <- struct{}{}
		}
	}()
	var mu sync.Mutex
	runStreams(b, streams, func(s int) {
		mu.Lock()
		_, err := nc.Write(frames[s])
		mu.Unlock()
		if err != nil {
			panic(err)
		}
		<-done[s]
	})
}
