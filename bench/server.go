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
// "READY <addresses>", then answers each command ("stats", or "gc" to give
// freed memory back to the OS first) with "STATS <mallocs> <rss bytes>
// <connections> <long operations running> <raft term>".
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
	return commands(in, out, func(cmd []string) (string, error) {
		switch strings.Join(cmd, " ") {
		case "gc":
			debug.FreeOSMemory()
		case "stats":
		default:
			return "", fmt.Errorf("unknown command %q", cmd)
		}
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		rss, err := residentBytes()
		if err != nil {
			return "", err
		}
		held := 0
		if cs.held != nil {
			held = cs.held()
		}
		var term uint64
		if cs.term != nil {
			term = cs.term()
		}
		return fmt.Sprintf("STATS %d %d %d %d %d", ms.Mallocs, rss, cs.conns(), held, term), nil
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
	addrs []string
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
func startServer(s *system, profileDir, dataDir string) (*serverProc, error) {
	env := []string{serveEnv + "=" + s.name}
	if dataDir != "" {
		env = append(env, dataDirEnv+"="+dataDir)
	}
	c, err := startChild(s.name+" server", profileDir, env...)
	if err != nil {
		return nil, err
	}
	return &serverProc{child: c, addrs: strings.Split(c.ready, ",")}, nil
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
