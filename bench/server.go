package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// serveMain is a server process: it starts the system's server, prints
// "READY <addresses>", then answers the commands of serverCommands.
func serveMain(name string, in io.Reader, out io.Writer) error {
	s := systemNamed(name)
	if s == nil {
		return fmt.Errorf("no system %q", name)
	}
	addrs, cs, err := s.serve()
	if err != nil {
		return fmt.Errorf("%s: serve: %w", name, err)
	}
	fmt.Fprintf(out, "READY %s\n", addrList(addrs))
	return serverCommands(in, out, cs)
}

// serverCommands answers the commands of a server process, the minimal
// ping-pong's too, until in closes:
//
//	stats     "STATS <mallocs> <rss bytes> <connections> <long operations
//	          running> <raft term>" (a counter cs lacks reads 0)
//	gc        the same, once freed memory is given back to the OS
//	trace     "TRACE": an execution trace starts (-trace), into the next
//	          file of the process's series
//	untrace   "TRACE": it ends
func serverCommands(in io.Reader, out io.Writer, cs counters) error {
	var tr tracer
	defer tr.stop()
	return commands(in, out, func(cmd []string) (string, error) {
		switch strings.Join(cmd, " ") {
		case "gc":
			debug.FreeOSMemory()
		case "stats":
		case "trace":
			return "TRACE", tr.start()
		case "untrace":
			return "TRACE", tr.stop()
		default:
			return "", fmt.Errorf("unknown command %q", cmd)
		}
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		rss, err := residentBytes()
		if err != nil {
			return "", err
		}
		conns, held := 0, 0
		if cs.conns != nil {
			conns = cs.conns()
		}
		if cs.held != nil {
			held = cs.held()
		}
		var term uint64
		if cs.term != nil {
			term = cs.term()
		}
		return fmt.Sprintf("STATS %d %d %d %d %d", ms.Mallocs, rss, conns, held, term), nil
	})
}

// residentBytes is the process's resident set size.
func residentBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("resident set size: %w", err)
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, fmt.Errorf("resident set size: unexpected /proc/self/statm %q", b)
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resident set size: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}

// serverProc is a running server process, seen from the driver.
type serverProc struct {
	*child
	addrs   []string
	tracing bool // -trace: the sequential phases are traced
}

type serverStats struct {
	mallocs uint64
	rss     int64
	conns   int
	held    int
	term    uint64 // the newest raft term of a replicated system's members
}

// startServer re-executes this program as the server of s, keeping its
// data (a replicated system's) under dataDir.
func startServer(s *system, cfg config, dataDir string) (*serverProc, error) {
	env := []string{serveEnv + "=" + s.name}
	if dataDir != "" {
		env = append(env, dataDirEnv+"="+dataDir)
	}
	c, err := startChild(s.name+" server", cfg, env...)
	if err != nil {
		return nil, err
	}
	return &serverProc{child: c, addrs: strings.Split(c.ready, ","), tracing: cfg.traceDir != ""}, nil
}

func (p *serverProc) stats(gc bool) (serverStats, error) {
	cmd := "stats"
	if gc {
		cmd = "gc"
	}
	f, err := p.request(cmd, "STATS")
	if err != nil {
		return serverStats{}, fmt.Errorf("server stats: %w", err)
	}
	var st serverStats
	if _, err := fmt.Sscan(strings.Join(f, " "), &st.mallocs, &st.rss, &st.conns, &st.held, &st.term); err != nil {
		return serverStats{}, fmt.Errorf("server stats %q: %w", f, err)
	}
	return st, nil
}

// trace starts (on) or ends the server's execution trace of a sequential
// phase, if the run traces them.
func (p *serverProc) trace(on bool) error {
	if !p.tracing {
		return nil
	}
	cmd := "untrace"
	if on {
		cmd = "trace"
	}
	_, err := p.request(cmd, "TRACE")
	return err
}
