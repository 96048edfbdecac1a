package main

import (
	"bytes"
	"context"
	"runtime/debug"
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
		{args: []string{"-version"}, code: 0, stdout: "ffgen "},
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

func TestVersionFromBuildInfo(t *testing.T) {
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a tool of another module", debug.BuildInfo{Main: debug.Module{Path: "example.com/counters", Version: "(devel)"},
			Deps: []*debug.Module{dep("golang.org/x/tools", "v0.52.0", nil), dep(module, "v0.4.1", nil)}}, "v0.4.1"},
		{"a tool from a local clone", debug.BuildInfo{Main: debug.Module{Path: "example.com/counters"},
			Deps: []*debug.Module{dep(module, "v0.0.0-00010101000000-000000000000", dep("../ffgen", "(devel)", nil))}},
			"v0.0.0-00010101000000-000000000000 (replaced by ../ffgen)"},
		{"installed at a version", debug.BuildInfo{Main: debug.Module{Path: module, Version: "v0.5.0"}}, "v0.5.0"},
		{"built in a clone", debug.BuildInfo{Main: debug.Module{Path: module, Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}},
			"devel 0123456789ab (modified)"},
		{"not built from ffgen", debug.BuildInfo{Main: debug.Module{Path: "example.com/other"}}, "devel"},
	} {
		if got := versionFrom(&tc.bi, true); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := versionFrom(nil, false); !strings.HasPrefix(got, "devel") {
		t.Errorf("without build information: %q", got)
	}
}
