//go:build unix

// Package docs holds the test that runs getting-started.md as written.
package docs

import (
	"bufio"
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// block is one fenced code block of a Markdown file.
type block struct {
	lang, body string
	line       int
}

func fencedBlocks(t *testing.T, file string) []block {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimPrefix(line, "```"), line: n}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated code block", file, cur.line)
	}
	return out
}

// script turns the document into one shell script: every go block that
// starts with a "// path" comment is written to that path when the reader
// would create it, and every sh block runs as it stands, in order, in one
// shell, as a reader pasting them into one terminal would.
func script(t *testing.T, blocks []block) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("set -e\n")
	files, commands := 0, 0
	for _, bl := range blocks {
		switch bl.lang {
		case "go":
			first, _, _ := strings.Cut(bl.body, "\n")
			path, ok := strings.CutPrefix(first, "// ")
			if !ok || !strings.HasSuffix(path, ".go") {
				continue // a fragment, not a file of the module
			}
			fmt.Fprintf(&b, "mkdir -p %s && cat > %s <<'GETTING_STARTED_EOF'\n%sGETTING_STARTED_EOF\n", filepath.Dir(path), path, bl.body)
			files++
		case "sh":
			fmt.Fprintf(&b, "echo '+ getting-started.md:%d'\n%s", bl.line, bl.body)
			commands++
		}
	}
	if files < 5 || commands < 5 {
		t.Fatalf("found %d files and %d shell blocks; the document's layout changed", files, commands)
	}
	return b.String()
}

// fillModuleCache fetches the module graphs of the guide's module: one
// that requires this repository (replaced by the clone at repo) and
// imports the packages of it that the guide's files import. Those graphs
// are not this repository's own: the module's go mod tidy also reads the
// modules that the tests of its dependencies import (etcd's raft's, for
// one), at the versions the module selects, and that selection changes as
// the guide adds files. So each go mod tidy of the guide gets a module of
// its own, with the imports of the files written before it.
func fillModuleCache(ctx context.Context, t *testing.T, blocks []block, repo string) error {
	t.Helper()
	var imports []string
	var stages [][]string
	for _, bl := range blocks {
		switch bl.lang {
		case "go":
			if !strings.HasPrefix(bl.body, "// ") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), "", bl.body, parser.ImportsOnly)
			if err != nil {
				continue // a fragment, not a file of the module
			}
			var paths []string
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				paths = append(paths, path)
			}
			if strings.Contains(bl.body, "\n//go:generate go tool ffgen\n") {
				// What the code ffgen generates for it imports.
				paths = append(paths, "github.com/ffgen/ffgen/runtime", "github.com/ffgen/ffgen/runtime/codec")
			}
			for _, path := range paths {
				if strings.HasPrefix(path, "github.com/ffgen/ffgen/") && !slices.Contains(imports, path) {
					imports = append(imports, path)
				}
			}
		case "sh":
			if strings.Contains(bl.body, "go mod tidy") && len(imports) > 0 {
				stages = append(stages, slices.Clone(imports))
			}
		}
	}
	if len(imports) == 0 {
		t.Fatal("the guide imports no package of ffgen; the document's layout changed")
	}
	stages = append(stages, imports) // what go test ./... builds at the end
	for _, stage := range stages {
		dir := t.TempDir()
		mod := "module example.com/prefetch\n\ngo 1.26\n\n" +
			"require github.com/ffgen/ffgen v0.0.0-00010101000000-000000000000\n\n" +
			"replace github.com/ffgen/ffgen => " + repo + "\n\n" +
			"tool github.com/ffgen/ffgen/cmd/ffgen\n"
		src := "package prefetch\n\nimport (\n"
		for _, path := range stage {
			src += "\t_ " + strconv.Quote(path) + "\n"
		}
		src += ")\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "prefetch.go"), []byte(src), 0o644); err != nil {
			return err
		}
		tidy := exec.CommandContext(ctx, "go", "mod", "tidy")
		tidy.Dir = dir
		if out, err := tidy.CombinedOutput(); err != nil {
			return fmt.Errorf("%v\n%s", err, out)
		}
	}
	return nil
}

// portsFree reports the first of the document's fixed ports that is taken.
func portsFree(doc string) error {
	for _, port := range []int{17101, 17102, 17201, 17202, 17301, 17302} {
		if !strings.Contains(doc, fmt.Sprint(port)) {
			return fmt.Errorf("port %d is no longer in the document: update the test", port)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		l.Close()
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		u.Close()
	}
	return nil
}

// The getting-started guide, run as written: a new module beside a clone
// of this repository, the generator as a tool, the code generated, a
// program with two servers and a client, two node processes and a thin
// client that fails over to the node left, and the module's tests.
func TestGettingStartedRunsAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and runs processes for about a minute")
	}
	doc, err := os.ReadFile("getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := portsFree(string(doc)); err != nil {
		t.Skipf("the guide's fixed ports are not free on this machine: %v", err)
	}
	blocks := fencedBlocks(t, "getting-started.md")
	sh := script(t, blocks)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(repo, filepath.Join(dir, "ffgen")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The guide's go mod tidy reads every module of its module's graph,
	// the packages its dependencies' tests import included: more than
	// building this repository fetches, so they are downloaded first.
	if err := fillModuleCache(ctx, t, blocks, repo); err != nil {
		t.Skipf("the module cache lacks the guide's module graph and it cannot be fetched: %v", err)
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", sh)
	cmd.Dir = dir
	// Offline: every module comes from the local clone or the module
	// cache this repository's build filled, and the cache's hashes are
	// trusted, since no checksum database may be reachable.
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The nodes run in the background: end the whole group, whatever
	// happened.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	t.Cleanup(func() {
		if cmd.Process != nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the guide's commands failed: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{
		"ffgen v0.0.0-00010101000000-000000000000 (replaced by ../ffgen)",
		"Add: 1 <nil>",
		"declared error comes back as itself: true",
		"Get after a1 crashed: 1, <nil>",
		`msg="node serving" node=a1 group=zone-a`,
		`msg="cluster: joined" node=b1`,
		`{"ready":true}`,
		"msg=member name=a1 group=zone-a",
		`msg="node stopped" node=a1`,
		`msg="node stopped" node=b1`,
		"ok  \texample.com/counters/counter",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Written on both nodes, read from them, and read from b1 after a1 left.
	if n := strings.Count(text, "visits = 5\n"); n != 3 {
		t.Errorf("%d lines of visits = 5, want 3 (add, get, get after a1 left)", n)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("output:\n%s", out)
	}
}
