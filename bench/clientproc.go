package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// clientMain is a client process: it dials the system's servers at addrs,
// warms up (connections, pools, the caches of every layer), prints
// "READY", then answers each command:
//
//	warm N    "WARM": a new worker makes N calls, untimed (for raw TCP,
//	          its connection is dialed then)
//	seq N     "SEQ <failed> <mallocs> <latency ns>...": that worker makes N
//	          calls one after the other, then ends
//	conc C D  "CONC <calls/s> <calls> <failed>": C callers call for D
//	hold K    "HOLD": K more long operations are started and held open
//	unhold    "UNHOLD <failed>": they end; how many failed meanwhile
func clientMain(name string, addrs []string, in io.Reader, out io.Writer) error {
	s := systemNamed(name)
	if s == nil {
		return fmt.Errorf("no system %q", name)
	}
	c, err := s.dial(addrs)
	if err != nil {
		return fmt.Errorf("%s: dial: %w", name, err)
	}
	defer c.close()
	if _, failed := sequential(c, warmUpCalls); failed == warmUpCalls {
		return fmt.Errorf("%s: every warm-up call failed", name)
	}
	fmt.Fprintln(out, "READY")
	var call func(string, []byte) error
	var done func()
	var h holds
	defer h.stop()
	var tr tracer
	defer tr.stop()
	return commands(in, out, func(cmd []string) (string, error) {
		n := 0
		if len(cmd) > 1 {
			var err error
			if n, err = strconv.Atoi(cmd[1]); err != nil {
				return "", fmt.Errorf("command %q: %w", cmd, err)
			}
		}
		switch {
		case cmd[0] == "warm" && call == nil:
			call, done = c.worker()
			timeCalls(call, make([]time.Duration, n))
			return "WARM", nil
		case cmd[0] == "seq" && call != nil:
			var before, after goruntime.MemStats
			lat := make([]time.Duration, n)
			if err := tr.start(); err != nil {
				return "", err
			}
			goruntime.ReadMemStats(&before)
			failed := timeCalls(call, lat)
			goruntime.ReadMemStats(&after)
			if err := tr.stop(); err != nil {
				return "", err
			}
			done()
			call, done = nil, nil
			return seqAnswer(failed, after.Mallocs-before.Mallocs, lat), nil
		case cmd[0] == "conc" && len(cmd) == 3:
			d, err := time.ParseDuration(cmd[2])
			if err != nil {
				return "", fmt.Errorf("command %q: %w", cmd, err)
			}
			tput, ph := concurrent(c, n, d)
			return fmt.Sprintf("CONC %f %d %d", tput, ph.calls, ph.failed), nil
		case cmd[0] == "hold":
			h.start(c, n)
			return "HOLD", nil
		case cmd[0] == "unhold":
			return fmt.Sprintf("UNHOLD %d", h.stop()), nil
		}
		return "", fmt.Errorf("unknown command %q", cmd)
	})
}

// warmUpCalls are made by each client before the first round.
const warmUpCalls = 500

// seqWarmUp calls are made, untimed, on the worker of a sequential phase
// before it is timed: the first of them dials raw TCP's connection.
const seqWarmUp = 100

func seqAnswer(failed int64, mallocs uint64, lat []time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SEQ %d %d", failed, mallocs)
	for _, d := range lat {
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(int64(d), 10))
	}
	return b.String()
}

// holds are the long operations a client process holds open.
type holds struct {
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started int
	failed  atomic.Int64
}

// start starts n more long operations, each with a key of its own, so the
// measured calls do not queue behind them. One that fails is counted and
// made again, so that the count stays.
func (h *holds) start(c client, n int) {
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancel(context.Background())
	}
	for i := h.started; i < h.started+n; i++ {
		h.wg.Go(func() {
			key := fmt.Sprintf("h%06d", i)
			for h.ctx.Err() == nil {
				if err := c.hold(h.ctx, key); err != nil && h.ctx.Err() == nil {
					h.failed.Add(1)
					reportFailure(err)
					// A failure can be immediate (no failover budget
					// left): do not spin on it.
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	h.started += n
}

// stop ends the long operations and returns how many failed.
func (h *holds) stop() int64 {
	if h.ctx == nil {
		return 0
	}
	h.cancel()
	h.wg.Wait()
	h.ctx, h.started = nil, 0
	return h.failed.Swap(0)
}

// clientProc is a running client process, seen from the driver.
type clientProc struct{ *child }

// startClient re-executes this program as a client of s calling addrs.
func startClient(s *system, addrs []string, cfg config) (*clientProc, error) {
	c, err := startChild(s.name+" client", cfg, clientEnv+"="+s.name, addrsEnv+"="+addrList(addrs))
	if err != nil {
		return nil, err
	}
	return &clientProc{c}, nil
}

// warm makes a new worker and warms it up for the next seq.
func (c *clientProc) warm(n int) error {
	_, err := c.request(fmt.Sprintf("warm %d", n), "WARM")
	return err
}

// seq makes n sequential calls on the worker warm made.
func (c *clientProc) seq(n int) (lat []time.Duration, failed int64, mallocs uint64, err error) {
	f, err := c.request(fmt.Sprintf("seq %d", n), "SEQ")
	if err != nil {
		return nil, 0, 0, err
	}
	if len(f) != 2+n {
		return nil, 0, 0, fmt.Errorf("seq: %d fields for %d calls", len(f), n)
	}
	if failed, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return nil, 0, 0, err
	}
	if mallocs, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return nil, 0, 0, err
	}
	lat = make([]time.Duration, n)
	for i, s := range f[2:] {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, 0, 0, err
		}
		lat[i] = time.Duration(ns)
	}
	return lat, failed, mallocs, nil
}

// concurrent runs callers goroutines calling as fast as they can for d.
func (c *clientProc) concurrent(callers int, d time.Duration) (float64, phase, error) {
	f, err := c.request(fmt.Sprintf("conc %d %v", callers, d), "CONC")
	if err != nil {
		return 0, phase{}, err
	}
	var tput float64
	var ph phase
	if _, err := fmt.Sscan(strings.Join(f, " "), &tput, &ph.calls, &ph.failed); err != nil {
		return 0, phase{}, fmt.Errorf("conc: %q: %w", f, err)
	}
	return tput, ph, nil
}

func (c *clientProc) hold(n int) error {
	_, err := c.request(fmt.Sprintf("hold %d", n), "HOLD")
	return err
}

func (c *clientProc) unhold() (int64, error) {
	f, err := c.request("unhold", "UNHOLD")
	if err != nil {
		return 0, err
	}
	if len(f) != 1 {
		return 0, errors.New("unhold: no count")
	}
	return strconv.ParseInt(f[0], 10, 64)
}
