//go:build unix

package testkit

import (
	"errors"
	"os"
	goruntime "runtime"
	"strconv"
	"testing"
	"time"
)

func TestStatCPUTime(t *testing.T) {
	// A command name with a space and a parenthesis in it, as a process
	// may name itself; utime 250 and stime 75 ticks.
	line := "4242 (bank node) x) S 1 4242 4242 0 -1 4194560 1186 0 0 0 250 75 0 0 20 0 9 0 1703 1269612544 5412 18446744073709551615\n"
	got, err := statCPUTime(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want {
		t.Errorf("statCPUTime = %v, want %v", got, want)
	}
	for _, bad := range []string{"4242 no parenthesis 1 2 3", "4242 (short) S 1 2 3", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 ten eleven 0 0"} {
		if _, err := statCPUTime(bad); err == nil {
			t.Errorf("statCPUTime(%q) = nil error", bad)
		}
	}
}

func TestProcCPUTimeCountsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system:", err)
	}
	before, err := ProcessCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel has counted at least 100 ms more; a clock tick
	// is 10 ms, so a process that stays at its first figure is misread.
	deadline := time.Now().Add(time.Minute)
	for {
		spin(10 * time.Millisecond)
		now, err := ProcessCPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 100*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute of spinning counted as %v of CPU time", now-before)
		}
	}
}

func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func TestStatFieldsOfThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/thread-self/stat"); err != nil {
		t.Skip("no /proc/thread-self on this system:", err)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	f, err := StatFields("/proc/thread-self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// Field 3 is the state, field 39 the CPU it ran on last: the thread
	// reading is running, on some CPU.
	if len(f) < 37 || f[0] != "R" {
		t.Fatalf("fields after the name: %q", f)
	}
	if cpu, err := strconv.Atoi(f[36]); err != nil || cpu < 0 {
		t.Errorf("field 39 (processor) = %q, want a CPU number", f[36])
	}
	if _, err := StatFields("/proc/self/no-such-file"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("StatFields of a missing file: %v, want os.ErrNotExist", err)
	}
}
