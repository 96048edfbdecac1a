package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// serveEnv names the system a re-executed copy of this program serves.
// The server runs in its own process, as it would in production, so that
// allocations, memory and CPU are each side's own.
const serveEnv = "BENCH_COMPARE_SERVE"

// serveMain is the server process: it starts the system's server, prints
// "READY <addresses>", then answers one line per command read from stdin
// ("stats", or "gc" to give freed memory back to the OS first) with
// "STATS <mallocs> <rss bytes> <connections> <long operations running>
// <raft term>". It returns when stdin closes.
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
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "gc":
			debug.FreeOSMemory()
		case "stats":
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		rss, err := residentBytes()
		if err != nil {
			return err
		}
		held := 0
		if cs.held != nil {
			held = cs.held()
		}
		var term uint64
		if cs.term != nil {
			term = cs.term()
		}
		fmt.Fprintf(out, "STATS %d %d %d %d %d\n", ms.Mallocs, rss, cs.conns(), held, term)
	}
	return sc.Err()
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
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
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
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serveEnv+"="+s.name)
	if profileDir != "" {
		cmd.Env = append(cmd.Env, profileEnv+"="+profileDir)
	}
	if dataDir != "" {
		cmd.Env = append(cmd.Env, dataDirEnv+"="+dataDir)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProc{cmd: cmd, in: in, out: bufio.NewReader(stdout)}
	line, err := p.out.ReadString('\n')
	addrs, ok := strings.CutPrefix(strings.TrimSpace(line), "READY ")
	if err != nil || !ok {
		p.stop()
		return nil, fmt.Errorf("%s server did not start: %q %v", s.name, line, err)
	}
	p.addrs = strings.Split(addrs, ",")
	return p, nil
}

func (p *serverProc) stats(gc bool) (serverStats, error) {
	cmd := "stats\n"
	if gc {
		cmd = "gc\n"
	}
	if _, err := io.WriteString(p.in, cmd); err != nil {
		return serverStats{}, err
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return serverStats{}, fmt.Errorf("server stats: %w", err)
	}
	var st serverStats
	if _, err := fmt.Sscanf(line, "STATS %d %d %d %d %d\n", &st.mallocs, &st.rss, &st.conns, &st.held, &st.term); err != nil {
		return serverStats{}, fmt.Errorf("server stats %q: %w", line, err)
	}
	return st, nil
}

func (p *serverProc) stop() {
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-compare: server process: %v\n", err)
	}
}
