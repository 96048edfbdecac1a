package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoPath is a path of the repository written in backticks: a Go file or
// a directory of one of the module's trees.
var repoPath = regexp.MustCompile("`((?:runtime|internal|examples|cmd|templates|bench)/[A-Za-z0-9_./-]*)`")

// Every file and directory the docs name exists, so that a reader who
// follows the walk of a call through the files (ARCHITECTURE.md) or any
// other pointer into the code lands where it says, after files move.
func TestDocsNameFilesThatExist(t *testing.T) {
	mds, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	mds = append(mds, "../README.md")
	named := 0
	for _, md := range mds {
		b, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				p := strings.TrimSuffix(m[1], "/")
				if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(m[1], "/") {
					continue // a package path or a command, not a file
				}
				named++
				if _, err := os.Stat(filepath.Join("..", p)); err != nil {
					t.Errorf("%s:%d names %s, which does not exist", md, i+1, m[1])
				}
			}
		}
	}
	if named < 20 {
		t.Fatalf("found %d paths in the docs; the pattern no longer matches how they name files", named)
	}
}
