//go:build unix

package main

import "testing"

func TestCountCPUs(t *testing.T) {
	for _, tc := range []struct {
		list string
		want int
	}{
		{"0", 1},
		{"0-1", 2},
		{"1", 1},
		{"0,2-3", 3},
		{"0-3,8-11", 8},
	} {
		if got, err := countCPUs(tc.list); err != nil || got != tc.want {
			t.Errorf("countCPUs(%q) = %d, %v; want %d", tc.list, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "x", "3-1", "0,"} {
		if n, err := countCPUs(bad); err == nil {
			t.Errorf("countCPUs(%q) = %d, want an error", bad, n)
		}
	}
}
