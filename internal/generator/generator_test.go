package generator

import (
	"bytes"
	"context"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const svcA = `package p

import "context"

//ff:service
type Alpha interface {
	//ff:entity id
	Get(ctx context.Context, id string) (string, error)
}
`

const svcB = `package p

import "context"

//ff:service
type Beta interface {
	//ff:entity n
	Put(ctx context.Context, n int) error
}
`

// module writes a throwaway module with the given files and returns its
// directory.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/p\n\ngo 1.26\n"
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func run(t *testing.T, cfg Config) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), &cfg, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunWritesOnlyChangedFiles(t *testing.T) {
	dir := module(t, map[string]string{"a.go": svcA})
	if code, _, stderr := run(t, Config{Dir: dir}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	out := filepath.Join(dir, "alpha_ff.go")
	src, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(src, []byte(generatedHeader+"\n// Source: a.go\n// Command: ffgen\n\npackage p\n")) {
		t.Errorf("header:\n%s", src[:120])
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(out, old, old); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, Config{Dir: dir}); code != ExitOK {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if fi, err := os.Stat(out); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("unchanged output was rewritten (mtime %v, want %v)", fi.ModTime(), old)
	}
}

func TestCheck(t *testing.T) {
	dir := module(t, map[string]string{"a.go": svcA})
	code, _, stderr := run(t, Config{Dir: dir, Check: true})
	if code != ExitMistake || !strings.Contains(stderr, "alpha_ff.go: out of date") {
		t.Fatalf("check before generating: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "alpha_ff.go")); !os.IsNotExist(err) {
		t.Fatalf("-check wrote a file")
	}
	if code, _, _ := run(t, Config{Dir: dir}); code != ExitOK {
		t.Fatal("generate failed")
	}
	if code, _, stderr := run(t, Config{Dir: dir, Check: true}); code != ExitOK {
		t.Fatalf("check after generating: exit %d: %s", code, stderr)
	}
}

// A stale generated file that no longer compiles, and user code that uses
// the generated names, must not stop regeneration.
func TestStaleOutputAndUsesOfGeneratedNames(t *testing.T) {
	dir := module(t, map[string]string{
		"a.go":        svcA,
		"alpha_ff.go": generatedHeader + "\n\npackage p\n\nfunc broken() { undefinedThing() }\n",
		"use.go":      "package p\n\nvar _ = NewAlphaClient\nvar _ *AlphaClient\n",
	})
	code, _, stderr := run(t, Config{Dir: dir})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	src, _ := os.ReadFile(filepath.Join(dir, "alpha_ff.go"))
	if bytes.Contains(src, []byte("broken")) || !bytes.Contains(src, []byte("func NewAlphaClient(")) {
		t.Errorf("stale file not replaced:\n%s", src)
	}
}

func TestRealTypeErrorsAreReported(t *testing.T) {
	dir := module(t, map[string]string{"a.go": svcA, "bad.go": "package p\n\nvar _ = missing\n"})
	code, _, stderr := run(t, Config{Dir: dir})
	if code != ExitMistake || stderr != "bad.go:3:9: undefined: missing\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestTypeAndOutput(t *testing.T) {
	dir := module(t, map[string]string{"a.go": svcA, "b.go": svcB})
	code, _, stderr := run(t, Config{Dir: dir, Types: []string{"Beta"}, Output: "beta_gen.go"})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	src, err := os.ReadFile(filepath.Join(dir, "beta_gen.go"))
	if err != nil || !bytes.Contains(src, []byte("// Command: ffgen -output beta_gen.go\n")) {
		t.Fatalf("beta_gen.go: %v\n%s", err, src)
	}
	if _, err := os.Stat(filepath.Join(dir, "alpha_ff.go")); !os.IsNotExist(err) {
		t.Errorf("-type Beta also generated Alpha")
	}

	if code, _, stderr := run(t, Config{Dir: dir, Output: "x.go"}); code != ExitUsage || !strings.Contains(stderr, "-output needs exactly one service") {
		t.Errorf("-output with two services: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, Config{Dir: dir, Output: "x.go", Types: []string{"Alpha", "Beta"}}); code != ExitUsage {
		t.Errorf("-output with two types: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, Config{Dir: dir, Types: []string{"Gamma"}}); code != ExitMistake || !strings.Contains(stderr, "-type Gamma: no //ff:service interface") {
		t.Errorf("unknown -type: exit %d, %q", code, stderr)
	}
}

func TestBuildTags(t *testing.T) {
	dir := module(t, map[string]string{
		"a.go":   "//go:build special\n\n" + svcA,
		"doc.go": "package p\n",
	})
	if code, _, stderr := run(t, Config{Dir: dir}); code != ExitMistake || !strings.Contains(stderr, "no //ff:service interface") {
		t.Fatalf("without tags: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, Config{Dir: dir, Tags: "special"}); code != ExitOK {
		t.Fatalf("with tags: exit %d, %q", code, stderr)
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"Accounts": "accounts", "HTTPServer": "http_server", "UserAPI": "user_api",
		"accountsV2": "accounts_v2", "A": "a", "myService": "my_service",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseDirective(t *testing.T) {
	c := commentAt("//ff:timeout attempt=2s  operation=4s // why")
	d, ok := parseDirective(c)
	if !ok || d.Name != "timeout" || len(d.Args) != 2 || d.Args[0].Text != "attempt=2s" || d.Args[1].Text != "operation=4s" {
		t.Fatalf("got %+v", d)
	}
	if d.Args[1].Pos != c.Slash+token.Pos(len("//ff:timeout attempt=2s  ")) {
		t.Errorf("argument position %d", d.Args[1].Pos)
	}
	for _, s := range []string{"// ff:entity id", "//go:generate ffgen", "/*ff:entity x*/"} {
		if _, ok := parseDirective(commentAt(s)); ok {
			t.Errorf("%q parsed as a directive", s)
		}
	}
}

func commentAt(text string) *ast.Comment { return &ast.Comment{Slash: 100, Text: text} }
