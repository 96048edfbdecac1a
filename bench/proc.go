package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"unicode"
)

// Every server and every client runs in a process of its own: the program
// runs itself again, with an environment variable naming the part. A
// process is driven by lines on its stdin and answers each with one line
// on its stdout; it ends when its stdin closes.
//
// The driver process only starts the others, sends them commands and
// waits for their answers, so that nothing of one system runs in the
// process that measures another: a client measured beside another
// system's client, server or leftover goroutines was measured beside
// their timers, collector and threads.
const (
	serveEnv    = "BENCH_COMPARE_SERVE"    // the system a server process serves
	clientEnv   = "BENCH_COMPARE_CLIENT"   // the system a client process calls
	addrsEnv    = "BENCH_COMPARE_ADDRS"    // the addresses a client process dials
	pingPongEnv = "BENCH_COMPARE_PINGPONG" // "server" or "client": the minimal ping-pong
)

// child is a process this program started as one of its parts.
type child struct {
	what  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	ready string // what followed "READY " on its first line
}

// startChild re-executes this program with env added, and waits for its
// "READY" line.
func startChild(what string, cfg config, env ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, pinEnv(cfg.pin, isServer(env))...)
	if cfg.profileDir != "" {
		cmd.Env = append(cmd.Env, profileEnv+"="+filepath.Join(cfg.profileDir, fileName(what)+".pprof"))
	}
	if cfg.traceDir != "" {
		cmd.Env = append(cmd.Env, traceEnv+"="+filepath.Join(cfg.traceDir, fileName(what)))
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
	c := &child{what: what, cmd: cmd, in: in, out: bufio.NewReaderSize(stdout, 64<<10)}
	line, err := c.out.ReadString('\n')
	ready, ok := strings.CutPrefix(strings.TrimSpace(line), "READY")
	if err != nil || !ok {
		c.stop()
		return nil, fmt.Errorf("%s did not start: %q %v", what, line, err)
	}
	c.ready = strings.TrimSpace(ready)
	return c, nil
}

// isServer reports whether the environment env starts a server process,
// the minimal ping-pong's included.
func isServer(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, serveEnv+"=") || e == pingPongEnv+"=server" {
			return true
		}
	}
	return false
}

// request sends one command and returns the answer's fields after want,
// the word the answer must start with.
func (c *child) request(cmd, want string) ([]string, error) {
	if _, err := io.WriteString(c.in, cmd+"\n"); err != nil {
		return nil, err
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != want {
		return nil, fmt.Errorf("%s: unexpected answer %q", cmd, line)
	}
	return f[1:], nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) stop() {
	c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-compare: %s: %v\n", c.what, err)
	}
}

// fileName turns a system's name into a file name.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return '-'
	}, name)
}

// commands reads the commands of a child process, one per line, and
// writes each answer do returns on a line of its own, until in closes.
func commands(in io.Reader, out io.Writer, do func(cmd []string) (string, error)) error {
	sc := bufio.NewScanner(in)
	w := bufio.NewWriterSize(out, 64<<10)
	for sc.Scan() {
		ans, err := do(strings.Fields(sc.Text()))
		if err != nil {
			return err
		}
		w.WriteString(ans)
		w.WriteByte('\n')
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}
