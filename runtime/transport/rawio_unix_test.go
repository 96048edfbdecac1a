//go:build unix

package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, each wrapped as
// the transport wraps the connections it dials and accepts.
func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, b = tune(d), tune(<-accepted)
	t.Cleanup(func() { a.Close(); b.Close() })
	if _, ok := a.(*tcpConn); !ok {
		t.Fatalf("tune returned %T, want *tcpConn", a)
	}
	return a, b
}

// What one end writes, the other reads, in both directions at once, and
// a write larger than the socket buffers waits for the reader rather than
// returning short.
func TestTCPConnReadWrite(t *testing.T) {
	a, b := tcpPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	wrote := make(chan error, 2)
	go func() {
		n, err := a.Write(big)
		if err == nil && n != len(big) {
			err = io.ErrShortWrite
		}
		wrote <- err
	}()
	go func() {
		_, err := b.Write([]byte("pong"))
		wrote <- err
	}()
	got := make([]byte, len(big))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("the 4 MiB read differ from those written")
	}
	pong := make([]byte, 4)
	if _, err := io.ReadFull(a, pong); err != nil || string(pong) != "pong" {
		t.Fatalf("read %q, %v; want pong", pong, err)
	}
	for range 2 {
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
	}
	if n, err := a.Read(nil); n != 0 || err != nil {
		t.Errorf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

// Reads end the way net.Conn's do: at the deadline, at the peer's close,
// at the peer's reset and at this end's close, with the errors the stream
// tells apart by errors.Is, and named "read" as net.Conn names them.
func TestTCPConnErrors(t *testing.T) {
	a, b := tcpPair(t)
	p := make([]byte, 16)

	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := a.Read(p)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" || oe.Net != "tcp" || oe.Addr == nil {
		t.Errorf("read past the deadline: %#v, want a *net.OpError for read on tcp naming the peer", err)
	}
	a.SetReadDeadline(time.Time{})

	b.Write([]byte("last"))
	b.Close()
	if _, err := io.ReadFull(a, p[:4]); err != nil || string(p[:4]) != "last" {
		t.Fatalf("read %q, %v; want the bytes written before the close", p[:4], err)
	}
	if _, err := a.Read(p); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}

	a.Close()
	if _, err := a.Read(p); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := a.Write(p); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}

	c, d := tcpPair(t)
	d.(*tcpConn).SetLinger(0)
	d.Close() // a reset
	if _, err := c.Read(p); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after the peer's reset: %v, want ECONNRESET", err)
	}
}

// A read that waits is ended by a deadline set meanwhile from another
// goroutine: callers interrupt a reading caller this way.
func TestTCPConnDeadlineInterruptsRead(t *testing.T) {
	a, _ := tcpPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := a.Read(make([]byte, 8))
		done <- err
	}()
	a.SetReadDeadline(time.Unix(1, 0))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("interrupted read: %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("the read was not interrupted within %v", waitLimit)
	}
}

// Like a net.Conn, a tcpConn takes writes from several goroutines at
// once: each write arrives whole (the race detector checks the rest).
func TestTCPConnConcurrentWrites(t *testing.T) {
	a, b := tcpPair(t)
	const writers, each = 8, 200
	msg := func(w int) []byte { return bytes.Repeat([]byte{byte('a' + w)}, 64) }
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			for range each {
				if _, err := a.Write(msg(w)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	got := make([]byte, writers*each*64)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	counts := map[byte]int{}
	for i := 0; i < len(got); i += 64 {
		chunk := got[i : i+64]
		if !bytes.Equal(chunk, bytes.Repeat(chunk[:1], 64)) {
			t.Fatalf("bytes %d-%d mix writes: %q", i, i+64, chunk)
		}
		counts[chunk[0]]++
	}
	for w := range writers {
		if counts[byte('a'+w)] != each {
			t.Errorf("writer %d: %d writes arrived, want %d", w, counts[byte('a'+w)], each)
		}
	}
}
