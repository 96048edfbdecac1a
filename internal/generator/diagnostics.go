package generator

import (
	"cmp"
	"fmt"
	"go/token"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// Diagnostic is one mistake in the user's code, reported as
// file:line:col: message.
type Diagnostic struct {
	Pos token.Position
	Msg string
}

// diagnostics collects every mistake of a run so they are reported at once.
type diagnostics struct {
	fset *token.FileSet
	list []Diagnostic
}

func (d *diagnostics) errorf(pos token.Pos, format string, args ...any) {
	var p token.Position
	if d.fset != nil && pos.IsValid() {
		p = d.fset.Position(pos)
	}
	d.add(p, fmt.Sprintf(format, args...))
}

func (d *diagnostics) add(pos token.Position, msg string) {
	d.list = append(d.list, Diagnostic{Pos: pos, Msg: msg})
}

func (d *diagnostics) empty() bool { return len(d.list) == 0 }

// write prints the diagnostics sorted by position, without duplicates, with
// file names relative to dir when they are below it.
func (d *diagnostics) write(w io.Writer, dir string) {
	slices.SortFunc(d.list, func(a, b Diagnostic) int {
		return cmp.Or(
			cmp.Compare(a.Pos.Filename, b.Pos.Filename),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
			cmp.Compare(a.Msg, b.Msg))
	})
	d.list = slices.Compact(d.list)
	for _, diag := range d.list {
		fmt.Fprintln(w, format(diag, dir))
	}
}

func format(d Diagnostic, dir string) string {
	if d.Pos.Filename == "" {
		return "ffgen: " + d.Msg
	}
	name := relative(d.Pos.Filename, dir)
	if d.Pos.Line == 0 {
		return fmt.Sprintf("%s: %s", name, d.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", name, d.Pos.Line, d.Pos.Column, d.Msg)
}

// relative returns name relative to dir when it lies below dir.
func relative(name, dir string) string {
	if dir == "" {
		return name
	}
	rel, err := filepath.Rel(dir, name)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return name
	}
	return rel
}
