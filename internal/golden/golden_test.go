// Package golden holds ffgen's golden tests: every directory under testdata
// is a package of this module. A case with a want.stderr file is bad input
// and must produce exactly those diagnostics; any other case must generate
// exactly its committed *_ff.go files, which must build and vet.
//
// go test ./internal/golden -update rewrites the expectations. Directories
// named timing_* are inputs for the benchmarks only.
package golden

import (
	"bytes"
	"context"
	"flag"
	"go/build"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/generator"
)

var update = flag.Bool("update", false, "rewrite the expected files")

// cases returns the good and the bad case directories, as ./testdata/<case>.
func cases(t *testing.T) (good, bad []string) {
	t.Helper()
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// timing_ cases are inputs for the benchmarks only.
		if !e.IsDir() || strings.HasPrefix(e.Name(), "timing_") {
			continue
		}
		dir := "./" + filepath.ToSlash(filepath.Join("testdata", e.Name()))
		if _, err := os.Stat(filepath.Join(dir, "want.stderr")); err == nil {
			bad = append(bad, dir)
		} else {
			good = append(good, dir)
		}
	}
	return good, bad
}

func TestGolden(t *testing.T) {
	good, _ := cases(t)
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// One load for every good case keeps the test fast.
	res, err := generator.Generate(context.Background(), &generator.Config{Dir: abs, Patterns: good})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Diagnostics) > 0 {
		t.Fatalf("diagnostics for good cases: %v", res.Diagnostics)
	}
	if len(res.Orphans) > 0 {
		t.Errorf("orphans among the good cases: %v", res.Orphans)
	}
	got := map[string][]byte{}
	for _, f := range res.Files {
		got[f.Path] = f.Content
	}
	for _, dir := range good {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			existing, _ := filepath.Glob(filepath.Join(abs, dir, "*_ff.go"))
			var produced []string
			for p := range got {
				if filepath.Dir(p) == filepath.Join(abs, dir) {
					produced = append(produced, p)
				}
			}
			slices.Sort(produced)
			if len(produced) == 0 {
				t.Fatal("no file generated")
			}
			for _, p := range produced {
				compare(t, p, got[p])
			}
			for _, p := range existing {
				// Variants for other platforms or tags are not generated here.
				if ok, err := build.Default.MatchFile(filepath.Dir(p), filepath.Base(p)); err != nil || !ok {
					continue
				}
				if _, ok := got[p]; !ok {
					if *update {
						os.Remove(p)
						continue
					}
					t.Errorf("%s is committed but no longer generated", filepath.Base(p))
				}
			}
		})
	}
}

func TestDiagnostics(t *testing.T) {
	_, bad := cases(t)
	for _, dir := range bad {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			// A case may commit the file of a previous version, whose
			// schema the breaking-change check compares against.
			before := generatedFiles(t, abs)
			var stdout, stderr bytes.Buffer
			code := generator.Run(context.Background(), &generator.Config{Dir: abs}, &stdout, &stderr)
			if code != generator.ExitMistake {
				t.Errorf("exit code %d, want %d", code, generator.ExitMistake)
			}
			compare(t, filepath.Join(abs, "want.stderr"), stderr.Bytes())
			if after := generatedFiles(t, abs); !maps.EqualFunc(before, after, bytes.Equal) {
				t.Errorf("bad input changed its generated files: %v, had %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
			}
		})
	}
}

// generatedFiles returns the *_ff.go files of dir and their contents.
func generatedFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dir, "*_ff.go"))
	files := map[string][]byte{}
	for _, p := range matches {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = b
	}
	return files
}

// TestCompile builds and vets every good case with its generated files.
func TestCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	good, _ := cases(t)
	cmd := exec.Command("go", append([]string{"vet"}, good...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go vet: %v\n%s", err, out)
	}
	// The other variants, for another platform and tag.
	cmd = exec.Command("go", "vet", "-tags", "fast", "./testdata/variants")
	cmd.Env = append(os.Environ(), "GOOS=windows")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=windows go vet -tags fast: %v\n%s", err, out)
	}
}

// TestVariants: generating for another platform and tag writes the files
// of those variants, each with its source's constraint, and leaves the
// host's variants alone.
func TestVariants(t *testing.T) {
	dir, err := filepath.Abs("testdata/variants")
	if err != nil {
		t.Fatal(err)
	}
	res, err := generator.Generate(context.Background(), &generator.Config{
		Dir: dir, Tags: "fast", Env: append(os.Environ(), "GOOS=windows"),
	})
	if err != nil || len(res.Diagnostics) > 0 {
		t.Fatalf("%v, %v", err, res.Diagnostics)
	}
	var names []string
	for _, f := range res.Files {
		names = append(names, filepath.Base(f.Path))
		compare(t, f.Path, f.Content)
	}
	slices.Sort(names)
	if want := []string{"clock_fast_clock_ff.go", "store_other_store_ff.go"}; !slices.Equal(names, want) {
		t.Errorf("generated %v, want %v", names, want)
	}
}

func compare(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", filepath.Base(path), diff)
	}
}

// TestPatternIndependence: a service that embeds an interface of another
// package generates the same file whether the patterns name that package
// or not, and whether dependencies come from export data or source.
func TestPatternIndependence(t *testing.T) {
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	// crossbody's base uses io only in a function body, so its export
	// data does not import io, which its directive names.
	for _, c := range []struct{ dir, file string }{{"crosspkg", "catalog_ff.go"}, {"crossbody", "store_ff.go"}} {
		want, err := os.ReadFile(filepath.Join(abs, "testdata", c.dir, c.file))
		if err != nil {
			t.Fatal(err)
		}
		dir := "./testdata/" + c.dir
		for _, tc := range []struct {
			patterns []string
			budget   time.Duration
		}{
			{[]string{dir}, 0},
			{[]string{dir + "/..."}, 0},
			{[]string{dir + "/base", dir}, 0},
			{[]string{dir}, -1},
			{[]string{dir}, time.Minute},
		} {
			res, err := generator.Generate(context.Background(), &generator.Config{Dir: abs, Patterns: tc.patterns, ExportBudget: tc.budget})
			if err != nil || len(res.Diagnostics) > 0 || len(res.Files) != 1 {
				t.Fatalf("%v (budget %v): %v, %v, %d files", tc.patterns, tc.budget, err, res.Diagnostics, len(res.Files))
			}
			if diff := cmp.Diff(string(want), string(res.Files[0].Content)); diff != "" {
				t.Errorf("%v (budget %v): output differs (-golden +got):\n%s", tc.patterns, tc.budget, diff)
			}
		}
	}
}

// TestPerType: each service of a package generated by its own -type run,
// with code that uses the other's generated names, gives the file the run
// for every service gives.
func TestPerType(t *testing.T) {
	dir, err := filepath.Abs("testdata/pertype")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Reads", "Writes"} {
		res, err := generator.Generate(context.Background(), &generator.Config{Dir: dir, Types: []string{name}})
		if err != nil || len(res.Diagnostics) > 0 || len(res.Files) != 1 {
			t.Fatalf("-type %s: %v, %v, %d files", name, err, res.Diagnostics, len(res.Files))
		}
		want, err := os.ReadFile(res.Files[0].Path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(res.Files[0].Content)); diff != "" {
			t.Errorf("-type %s differs from the golden file (-want +got):\n%s", name, diff)
		}
	}
}

// TestDiagnosticsFromSource: the diagnostics of a dependency's file are
// the same when the dependency is type-checked from source as when it
// comes from export data, which keeps no columns.
func TestDiagnosticsFromSource(t *testing.T) {
	dir, err := filepath.Abs("testdata/bad_crosspkg")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := generator.Run(context.Background(), &generator.Config{Dir: dir, ExportBudget: -1}, &stdout, &stderr)
	if code != generator.ExitMistake {
		t.Errorf("exit code %d, want %d", code, generator.ExitMistake)
	}
	want, err := os.ReadFile(filepath.Join(dir, "want.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), stderr.String()); diff != "" {
		t.Errorf("from source (-export data +source):\n%s", diff)
	}
}
