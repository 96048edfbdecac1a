// Package generator is ffgen: it loads Go packages, finds the interfaces
// annotated with //ff:service, validates their directives into a model and
// renders the typed client, server adapter, descriptor and codec for each.
//
// The pipeline is load → directives → model → render → write. Every mistake
// in the user's code is collected and reported at once as file:line:col:
// message, and then nothing is written.
package generator

import (
	"context"
	"errors"
	"fmt"
	"go/token"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ffgen/ffgen/templates"
)

// Exit codes of Run.
const (
	ExitOK      = 0
	ExitMistake = 1 // a mistake in the user's code, or -check found stale files
	ExitUsage   = 2
)

// Config is one run of ffgen.
type Config struct {
	Dir      string   // the working directory; "" is the current one
	Patterns []string // package patterns; none means "."
	Types    []string // interfaces to generate; none means every //ff:service
	Output   string   // output file; only with one service
	Tags     string   // build tags, comma separated
	Check    bool     // write nothing; report the files that would change
	// AllowBreaking accepts changes that break the schema recorded in the
	// generated files instead of reporting them.
	AllowBreaking bool
	Env           []string // the environment of the go command; nil inherits
	// ExportBudget is how long loading waits for the export data of the
	// dependencies before it type-checks them from source: 0 is 1.5 s, a
	// negative value goes to source at once.
	ExportBudget time.Duration
}

func (c *Config) dir() string {
	if c.Dir != "" {
		return c.Dir
	}
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	return wd
}

// command is the header's record of the flags that shape the output.
// Patterns, -type and -check are left out: a service's file is the same
// whichever run wrote it, so "ffgen -check ./pkg" finds the output of one
// "ffgen -type X" per service current.
func (c *Config) command() string {
	s := "ffgen"
	if c.Output != "" {
		s += " -output " + c.Output
	}
	if c.Tags != "" {
		s += " -tags " + c.Tags
	}
	return s
}

// File is a rendered output file.
type File struct {
	Path    string
	Content []byte
}

// Result is what Generate produced: files, or the mistakes that stopped it.
type Result struct {
	Files       []File
	Diagnostics []Diagnostic
	// Orphans are generated files no service generates any more; Run
	// removes them, or with Check reports them.
	Orphans  []string
	diags    *diagnostics
	packages []string // the import paths loaded, for the build check
}

// ErrUsage reports a configuration that cannot work whatever the code.
var ErrUsage = errors.New("usage")

// Generate loads, validates and renders, and writes nothing. A non-nil
// error is a usage error; mistakes in the code come back as Diagnostics.
func Generate(ctx context.Context, cfg *Config) (*Result, error) {
	if len(cfg.Patterns) == 0 {
		cfg.Patterns = []string{"."}
	}
	if cfg.Output != "" && len(cfg.Types) > 1 {
		return nil, fmt.Errorf("%w: -output needs exactly one -type, got %d", ErrUsage, len(cfg.Types))
	}
	fset := token.NewFileSet()
	diags := &diagnostics{fset: fset}
	res := &Result{diags: diags}
	loadDiags := &diagnostics{fset: fset}
	pkgs := load(ctx, cfg, fset, loadDiags)
	if pkgs == nil {
		res.setDiagnostics(loadDiags)
		return res, nil
	}
	b := newBuilder(cfg, fset, diags)
	files := b.build(pkgs)
	if cfg.Output != "" && len(files) > 1 {
		return nil, fmt.Errorf("%w: -output needs exactly one service, found %d; choose one with -type", ErrUsage, len(files))
	}
	// The package is type-checked without its generated files, so uses of
	// the names they declare are expected to be undefined: those of every
	// service, since -type regenerates one but leaves the others' files.
	generated := map[string]bool{}
	for _, name := range b.services {
		for _, n := range ExportedNames(name) {
			generated[n] = true
		}
	}
	for _, d := range loadDiags.list {
		if name, ok := strings.CutPrefix(d.Msg, "undefined: "); ok && generated[name] {
			continue
		}
		diags.add(d.Pos, d.Msg)
	}
	if !diags.empty() {
		res.setDiagnostics(diags)
		return res, nil
	}
	expected := b.expected
	for _, f := range files {
		expected[f.Path] = true
	}
	res.Orphans = orphans(pkgs, expected)
	for _, p := range pkgs {
		res.packages = append(res.packages, p.PkgPath)
	}
	for _, f := range files {
		src, err := templates.Render(f)
		if err != nil {
			diags.add(token.Position{}, fmt.Sprintf("rendering %s: %v (a bug in ffgen)", f.Service.Name, err))
			continue
		}
		res.Files = append(res.Files, File{Path: f.Path, Content: src})
	}
	res.setDiagnostics(diags)
	return res, nil
}

func (r *Result) setDiagnostics(d *diagnostics) {
	r.diags = d
	r.Diagnostics = d.list
}

// Run is the ffgen command: it generates, then writes the files whose bytes
// changed (or, with Check, names them), and returns the exit code.
func Run(ctx context.Context, cfg *Config, stdout, stderr io.Writer) int {
	res, err := Generate(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "ffgen:", strings.TrimPrefix(err.Error(), ErrUsage.Error()+": "))
		return ExitUsage
	}
	if !res.diags.empty() {
		res.diags.write(stderr, cfg.dir())
		return ExitMistake
	}
	stale, err := write(res.Files, cfg.Check)
	if err != nil {
		fmt.Fprintln(stderr, "ffgen:", err)
		return ExitMistake
	}
	if !cfg.Check {
		for _, p := range res.Orphans {
			if err := os.Remove(p); err != nil {
				fmt.Fprintln(stderr, "ffgen:", err)
				return ExitMistake
			}
			fmt.Fprintf(stdout, "ffgen: removed %s: no service generates it any more\n", relative(p, cfg.dir()))
		}
		return ExitOK
	}
	for _, p := range stale {
		fmt.Fprintf(stderr, "%s: out of date; run go generate\n", relative(p, cfg.dir()))
	}
	for _, p := range res.Orphans {
		fmt.Fprintf(stderr, "%s: generated by ffgen for a service that no longer exists; run go generate to remove it\n", relative(p, cfg.dir()))
	}
	if len(stale) > 0 || len(res.Orphans) > 0 {
		return ExitMistake
	}
	// Current files can still fail to build: with the user's code around
	// them, or through a mistake of ffgen's own.
	if out, err := buildCheck(ctx, cfg, res.packages); err != nil {
		fmt.Fprintf(stderr, "ffgen: the packages do not build with their generated files: %v\n%s", err, out)
		return ExitMistake
	}
	return ExitOK
}

// buildCheck compiles the packages as they are on disk.
func buildCheck(ctx context.Context, cfg *Config, pkgs []string) ([]byte, error) {
	args := []string{"build", "-o", os.DevNull}
	if cfg.Tags != "" {
		args = append(args, "-tags="+cfg.Tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	return cmd.CombinedOutput()
}
