package main

import (
	"fmt"
	goruntime "runtime"
	"strconv"
)

// Where the processes run (-pin). Left free, the kernel places a
// sequential call's two threads on one CPU or on two, and which one a
// round gets moves its latency more than any change to a system does
// (README, *Figures*). Pinned, every round of every system runs the same
// way, so that a system's cost is compared, not its luck.
const (
	pinFree = ""    // the kernel places every thread
	pinOne  = "one" // every client and server process on CPU 0
	pinTwo  = "two" // clients on CPU 0, servers on CPU 1
)

// cpuEnv passes a child process the CPU it keeps all its threads on.
const cpuEnv = "BENCH_COMPARE_CPU"

// checkPin reports whether mode is one -pin takes and this machine can do.
func checkPin(mode string) error {
	switch mode {
	case pinFree:
		return nil
	case pinOne, pinTwo:
	default:
		return fmt.Errorf("-pin %q: want %q or %q", mode, pinOne, pinTwo)
	}
	if err := canPin(); err != nil {
		return err
	}
	if mode == pinTwo && goruntime.NumCPU() < 2 {
		return fmt.Errorf("-pin %s: needs two CPUs, this machine has %d", mode, goruntime.NumCPU())
	}
	return nil
}

// pinEnv is the environment that pins a child process, a server or not,
// as mode asks: nothing when mode leaves the kernel to place it.
func pinEnv(mode string, server bool) []string {
	cpu := 0
	switch {
	case mode == pinFree:
		return nil
	case mode == pinTwo && server:
		cpu = 1
	}
	return []string{cpuEnv + "=" + strconv.Itoa(cpu)}
}

// pinnedAs describes mode for the table's first line.
func pinnedAs(mode string) string {
	switch mode {
	case pinOne:
		return "; every client and server pinned to CPU 0 (-pin one)"
	case pinTwo:
		return "; every client pinned to CPU 0 and every server to CPU 1 (-pin two)"
	}
	return ""
}
