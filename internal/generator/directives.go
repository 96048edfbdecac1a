package generator

import (
	"go/ast"
	"go/token"
	"strings"
)

const directivePrefix = "//ff:"

// directive is one //ff: line: its name, its arguments with their
// positions, and where it sits.
type directive struct {
	Name string
	Args []arg
	Pos  token.Pos // the position of the comment's "//"
}

type arg struct {
	Text string
	Pos  token.Pos
}

func (d *directive) String() string { return directivePrefix + d.Name }

// text is the directive as written, spacing and comment aside.
func (d *directive) text() string {
	s := d.String()
	for _, a := range d.Args {
		s += " " + a.Text
	}
	return s
}

// parseDirective parses c when it is a directive. A trailing "// comment"
// is ignored. ok is false for ordinary comments.
func parseDirective(c *ast.Comment) (d *directive, ok bool) {
	text, found := strings.CutPrefix(c.Text, directivePrefix)
	if !found {
		return nil, false
	}
	if i := strings.Index(text, "//"); i >= 0 {
		text = text[:i]
	}
	d = &directive{Pos: c.Slash}
	base := c.Slash + token.Pos(len(directivePrefix))
	first := true
	for off := 0; off < len(text); {
		for off < len(text) && isSpace(text[off]) {
			off++
		}
		// Type arguments may hold spaces: Pair[string, int] is one name.
		end, depth := off, 0
		for end < len(text) && (depth > 0 || !isSpace(text[end])) {
			switch text[end] {
			case '[':
				depth++
			case ']':
				depth--
			}
			end++
		}
		if end == off {
			break
		}
		if first {
			d.Name, first = text[off:end], false
		} else {
			d.Args = append(d.Args, arg{Text: text[off:end], Pos: base + token.Pos(off)})
		}
		off = end
	}
	return d, true
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' }

// directivesOf returns the directives of a doc comment and its other lines,
// with the comment markers removed, for carrying onto generated code.
func directivesOf(doc *ast.CommentGroup) (dirs []*directive, text []string) {
	if doc == nil {
		return nil, nil
	}
	for _, c := range doc.List {
		if d, ok := parseDirective(c); ok {
			dirs = append(dirs, d)
			continue
		}
		text = append(text, commentLines(c.Text)...)
	}
	// Directives often follow a blank "//" separator line; drop trailing
	// blank lines so the generated doc ends where the prose ends.
	for len(text) > 0 && strings.TrimSpace(text[len(text)-1]) == "" {
		text = text[:len(text)-1]
	}
	return dirs, text
}

// commentLines strips the comment markers of one comment.
func commentLines(s string) []string {
	if rest, ok := strings.CutPrefix(s, "//"); ok {
		// Other tool directives (//go:, //nolint:) are not documentation.
		if len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t' && strings.Contains(strings.SplitN(rest, " ", 2)[0], ":") {
			return nil
		}
		return []string{strings.TrimPrefix(rest, " ")}
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "/*"), "*/")
	return strings.Split(strings.Trim(s, "\n"), "\n")
}

// knownDirectives lists every directive and where it belongs.
var knownDirectives = map[string]string{
	"service":      "interface",
	"default":      "interface or method",
	"timeout":      "interface or method",
	"entity":       "method",
	"fail":         "method",
	"failover":     "method",
	"hold":         "method",
	"scatter":      "method",
	"hedge":        "method",
	"linearizable": "method",
}
