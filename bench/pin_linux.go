package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinSelf keeps every thread of this process on cpu. The runtime starts
// threads before main runs, so each is pinned by its ID; threads started
// later inherit the mask of the thread that starts them.
func pinSelf(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pin thread %d to CPU %d: %w", tid, cpu, err)
		}
	}
	return nil
}

// canPin reports whether -pin can work here.
func canPin() error { return nil }
