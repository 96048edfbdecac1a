package main

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// The minimal ping-pong is the floor the raw TCP row is checked against:
// two processes of their own, one connection, the client writing 39 bytes
// and reading 32 with io.ReadFull, the server a goroutine per connection
// echoing, nothing else in either process. Raw TCP does the same work
// through the harness (its client interface, its command loop, a counted
// listener); when its p50 strays from the ping-pong's, the harness, not
// the wire, is being measured.

// pingPongServerMain listens, prints "READY <address>" and echoes until
// in closes.
func pingPongServerMain(in io.Reader, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var buf [keyLen + payloadLen]byte
				for {
					if _, err := io.ReadFull(c, buf[:]); err != nil {
						return
					}
					if _, err := c.Write(buf[keyLen:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	fmt.Fprintf(out, "READY %s\n", ln.Addr())
	return serverCommands(in, out, counters{})
}

// pingPongClientMain dials addr, warms up as every client does, prints
// "READY", and answers "seq N" as a client process does, with no
// allocations counted.
func pingPongClientMain(addr string, in io.Reader, out io.Writer) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var req [keyLen + payloadLen]byte
	var resp [payloadLen]byte
	call := func() error {
		if _, err := c.Write(req[:]); err != nil {
			return err
		}
		_, err := io.ReadFull(c, resp[:])
		return err
	}
	for range warmUpCalls {
		if err := call(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "READY")
	var tr tracer
	defer tr.stop()
	return commands(in, out, func(cmd []string) (string, error) {
		n := 0
		if len(cmd) == 2 {
			n, _ = strconv.Atoi(cmd[1])
		}
		switch {
		case len(cmd) == 2 && cmd[0] == "warm":
			for range n {
				if err := call(); err != nil {
					return "", err
				}
			}
			return "WARM", nil
		case len(cmd) == 2 && cmd[0] == "seq":
			lat := make([]time.Duration, n)
			if err := tr.start(); err != nil {
				return "", err
			}
			for i := range lat {
				start := time.Now()
				if err := call(); err != nil {
					return "", err
				}
				lat[i] = time.Since(start)
			}
			if err := tr.stop(); err != nil {
				return "", err
			}
			return seqAnswer(0, 0, lat), nil
		}
		return "", fmt.Errorf("unknown command %q", cmd)
	})
}

// floorProcs are the two processes of the minimal ping-pong.
type floorProcs struct {
	server *serverProc
	client *clientProc
}

func startFloor(cfg config) (*floorProcs, error) {
	srv, err := startChild("ping-pong server", cfg, pingPongEnv+"=server")
	if err != nil {
		return nil, err
	}
	cli, err := startChild("ping-pong client", cfg, pingPongEnv+"=client", addrsEnv+"="+srv.ready)
	if err != nil {
		srv.stop()
		return nil, err
	}
	return &floorProcs{server: &serverProc{child: srv, addrs: []string{srv.ready}, tracing: cfg.traceDir != ""}, client: &clientProc{cli}}, nil
}

func (f *floorProcs) stop() {
	f.client.stop()
	f.server.stop()
}
