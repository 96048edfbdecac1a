package generator

import (
	"go/ast"
	"go/build/constraint"
	"path/filepath"
	"strings"
)

// fileConstraint returns the build constraint of a source file: its
// //go:build line and the GOOS and GOARCH its name implies (svc_linux.go),
// joined with &&; nil if it has none. The generated file of a service
// carries its source's constraint, or other platforms would compile a
// file whose interface they do not have.
func fileConstraint(f *ast.File, filename string) constraint.Expr {
	var expr constraint.Expr
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if constraint.IsGoBuild(c.Text) {
				if e, err := constraint.Parse(c.Text); err == nil {
					expr = e
				}
			}
		}
	}
	if name := nameConstraint(filename); name != nil {
		if expr == nil {
			return name
		}
		return &constraint.AndExpr{X: expr, Y: name}
	}
	return expr
}

// nameConstraint is the constraint implied by a file name, as go/build
// reads it: name_GOOS.go, name_GOARCH.go, name_GOOS_GOARCH.go.
func nameConstraint(filename string) constraint.Expr {
	stem := strings.TrimSuffix(filepath.Base(filename), ".go")
	stem = strings.TrimSuffix(stem, "_test")
	parts := strings.Split(stem, "_")
	n := len(parts)
	if n < 2 {
		return nil
	}
	tag := func(s string) constraint.Expr { return &constraint.TagExpr{Tag: s} }
	if n >= 3 && knownOS[parts[n-2]] && knownArch[parts[n-1]] {
		return &constraint.AndExpr{X: tag(parts[n-2]), Y: tag(parts[n-1])}
	}
	if knownOS[parts[n-1]] || knownArch[parts[n-1]] {
		return tag(parts[n-1])
	}
	return nil
}

// outputPath is where the file of service name, declared in source, goes:
// <snake case>_ff.go beside it, or, when source has a build constraint,
// <source stem>_<snake case>_ff.go, so that each variant of a service has
// a file of its own and generating one never overwrites another.
func outputPath(source, name string, constrained bool) string {
	base := snakeCase(name) + "_ff.go"
	if constrained {
		base = strings.TrimSuffix(filepath.Base(source), ".go") + "_" + base
	}
	return filepath.Join(filepath.Dir(source), base)
}

// The GOOS and GOARCH values go/build knows in file names (go tool dist
// list, plus the ones it reserves).
var knownOS = setOf("aix android darwin dragonfly freebsd hurd illumos ios js linux nacl netbsd openbsd plan9 solaris wasip1 windows zos")

var knownArch = setOf("386 amd64 amd64p32 arm armbe arm64 arm64be loong64 mips mipsle mips64 mips64le mips64p32 mips64p32le ppc ppc64 ppc64le riscv riscv64 s390 s390x sparc sparc64 wasm")

func setOf(s string) map[string]bool {
	m := map[string]bool{}
	for f := range strings.FieldsSeq(s) {
		m[f] = true
	}
	return m
}
