//go:build unix

// Package docs holds the test that runs getting-started.md as written.
package docs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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

// publish makes what the guide's git clone fetches: a repository holding
// this tree as it is, uncommitted changes and new files included (so that
// the test checks the tree it runs in, not its last commit). It returns
// the environment that sends the guide's clone URL there, in git's own
// configuration variables: the module is not published, and the clone is
// the one step of the guide a test cannot take as a reader would. Nothing
// of Go's environment is changed.
func publish(t *testing.T, repo string) []string {
	t.Helper()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=ffgen", "-c", "user.email=ffgen@example.com"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("git %s: %v (the guide clones ffgen with git)", strings.Join(args, " "), err)
		}
		return string(out)
	}
	snap := filepath.Join(t.TempDir(), "ffgen")
	if err := os.Mkdir(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for name := range strings.SplitSeq(git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard"), "\x00") {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(repo, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(repo, name))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(snap, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	git(snap, "init", "-q", "-b", "main")
	git(snap, "add", "-A")
	git(snap, "commit", "-q", "-m", "the tree under test")
	n := 0
	if v, err := strconv.Atoi(os.Getenv("GIT_CONFIG_COUNT")); err == nil {
		n = v // the reader's own git configuration stays
	}
	return []string{
		"GIT_CONFIG_COUNT=" + strconv.Itoa(n+1),
		fmt.Sprintf("GIT_CONFIG_KEY_%d=url.%s.insteadOf", n, snap),
		fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", n, cloneURL),
	}
}

// cloneURL is the repository the guide clones.
const cloneURL = "https://github.com/ffgen/ffgen"

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
	if !strings.Contains(sh, "git clone "+cloneURL+"\n") {
		t.Fatalf("the guide no longer clones %s: update the test", cloneURL)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", sh)
	cmd.Dir = dir
	// The reader's environment: the module proxy, the checksum database
	// and the module cache as the go command finds them. A guide that
	// needs more than that fails here.
	cmd.Env = append(os.Environ(), publish(t, repo)...)
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
