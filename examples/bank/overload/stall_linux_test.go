package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/ffgen/ffgen/internal/testkit"
)

// startCPUs are the CPUs this process could run on as it started, before
// a test bound a thread (the main thread, which /proc/self/status
// describes, may be one of them).
var startCPUs, startCPUsErr = allowedCPUList("/proc/self/status")

// boundThreads lists this process's threads whose CPUs are fewer than
// want, the process's own, but for the main thread: the runtime cannot
// end it, and parks it for good instead of a locked goroutine's thread
// that ends, so it runs nothing and starts no process again.
func boundThreads(t *testing.T, want string) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	mainThread := strconv.Itoa(os.Getpid())
	var bound []string
	for _, s := range tasks {
		tid := filepath.Base(filepath.Dir(s))
		if tid == mainThread {
			continue
		}
		got, err := allowedCPUList(s)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if got != want {
			bound = append(bound, tid+": "+got)
		}
	}
	return bound
}

// The stall watch binds a thread to each CPU. None may outlive it bound:
// every process this one starts afterwards, on whichever thread, inherits
// that thread's binding, and a run whose nodes and bankload all started
// on a thread bound to one core of two ran on that core alone, at half
// the throughput, the machine half idle (it looked like a convoy of the
// nodes for several sessions).
func TestStallWatchLeavesNoThreadBound(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: a thread bound to it is bound to all of them")
	}
	want := startCPUs
	if startCPUsErr != nil {
		t.Fatal(startCPUsErr)
	}
	w := watchStalls()
	w.end()
	// A thread locked to a goroutine ends with it, a moment after.
	testkit.Until(t, "the stall watch's threads end", func() bool {
		return len(boundThreads(t, want)) == 0
	})
	// And what the process starts next may run on every CPU, whichever
	// thread starts it.
	for range 20 {
		out, err := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status").Output()
		if err != nil {
			t.Skipf("cannot run grep: %v", err)
		}
		if got := strings.TrimSpace(strings.TrimPrefix(string(out), "Cpus_allowed_list:")); got != want {
			t.Fatalf("a child process may run on CPUs %s, want this process's %s", got, want)
		}
	}
}
