//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/transport"
)

// hostile opens connections to addr until ctx ends: stalled ones that say
// Hello and announce a large frame they never send, and garbage ones that
// send random bytes and are redialed when the node closes them.
func hostile(ctx context.Context, addr string, stalled, garbage int) (opened int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	count := func() { mu.Lock(); opened++; mu.Unlock() }
	// Hello, then the header of a frame just under the size limit.
	stall, _ := frame.Append(nil, &frame.Hello{Version: frame.Version, Node: "hostile", Group: "x"}, 0)
	stall = binary.BigEndian.AppendUint32(stall, transport.DefaultMaxFrameSize-1)
	stall = append(stall, frame.Version, byte(frame.TypeAttempt))
	part := make([]byte, 1<<20) // of the body, shared: writers only read it
	for range stalled {
		wg.Go(func() {
			c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			count()
			c.Write(stall)
			c.Write(part) // then silence
			<-ctx.Done()
		})
	}
	for range garbage {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for ctx.Err() == nil {
				c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
				if err != nil {
					sleep(ctx, 100*time.Millisecond)
					continue
				}
				count()
				rand.Read(buf)
				c.SetWriteDeadline(time.Now().Add(time.Second))
				c.Write(buf)
				c.Close()
				sleep(ctx, 50*time.Millisecond)
			}
		})
	}
	wg.Wait()
	return opened
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
