package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{args: []string{"-version"}, code: 0, stdout: "ffgen devel\n"},
		{args: []string{"-nope"}, code: 2, stderr: "flag provided but not defined: -nope"},
		{args: []string{"-h"}, code: 0, stderr: "usage: ffgen [flags] [packages]"},
		{args: []string{"-type", "A,B", "-output", "x.go"}, code: 2, stderr: "-output needs exactly one -type"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
			t.Errorf("ffgen %v: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out.String(), errb.String(), tc.code, tc.stdout, tc.stderr)
		}
	}
}
