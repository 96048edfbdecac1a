package testkit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcessCPUTime returns the CPU time, user and system, that process pid
// has used, from /proc/<pid>/stat where there is one.
func ProcessCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	d, err := statCPUTime(string(b))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return d, nil
}

// statCPUTime reads utime and stime from a /proc/<pid>/stat line: the
// 14th and 15th fields, in the clock ticks of USER_HZ, which Linux keeps
// at 100 on every architecture.
func statCPUTime(stat string) (time.Duration, error) {
	f, err := statFields(stat)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * (time.Second / 100), nil
}

// StatFields returns the fields of the stat file at path (a process's
// /proc/<pid>/stat, or a thread's /proc/<pid>/task/<tid>/stat) that
// follow the command's name: field n of proc(5), counting from 1, is at
// index n-3. The name, in parentheses, may hold spaces and parentheses,
// so the fields are counted after the last ')'.
func StatFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := statFields(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func statFields(stat string) ([]string, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, errors.New("no command name")
	}
	return strings.Fields(stat[i+1:]), nil
}
