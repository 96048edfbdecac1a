package generator

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/tools/go/packages"
)

// orphans returns the files of the loaded packages that ffgen wrote but no
// service generates any more: the service was renamed or removed, and its
// old file, left behind, would no longer build. expected holds the output
// path of every service found, written or not.
//
// A generated file that the current build configuration leaves out (a
// variant for another platform or tag) is judged only by its source file:
// whether that file still declares the service is for a run with that
// configuration to say.
func orphans(pkgs []*packages.Package, expected map[string]bool) []string {
	var out []string
	for _, p := range pkgs {
		for _, name := range p.GoFiles {
			h, ok := readHeader(name)
			if !ok || expected[name] {
				continue
			}
			// A file written with -output is not at a default path; it is
			// the service's as long as its source is there.
			if strings.Contains(h.command, " -output ") && h.sourceExists(name) {
				continue
			}
			out = append(out, name)
		}
		for _, name := range p.IgnoredFiles {
			if h, ok := readHeader(name); ok && !h.sourceExists(name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// header is what a generated file's first lines record.
type header struct{ source, command string }

func (h header) sourceExists(generated string) bool {
	if h.source == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(filepath.Dir(generated), h.source))
	return err == nil
}

// readHeader reads the header of name; ok is false if ffgen did not write it.
func readHeader(name string) (h header, ok bool) {
	f, err := os.Open(name)
	if err != nil {
		return h, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 4 && sc.Scan(); i++ {
		line := sc.Text()
		switch {
		case i == 0:
			if line != generatedHeader {
				return h, false
			}
			ok = true
		case strings.HasPrefix(line, "// Source: "):
			h.source = strings.TrimPrefix(line, "// Source: ")
		case strings.HasPrefix(line, "// Command: "):
			h.command = strings.TrimPrefix(line, "// Command: ") + " "
		}
	}
	return h, ok
}
