// Command ffgen generates typed fast-failover clients and servers from Go
// interfaces annotated with //ff: directives. Record it as a tool of your
// module (go get -tool github.com/ffgen/ffgen/cmd/ffgen) and run it from
// go generate:
//
//	//go:generate go tool ffgen
//
// Usage:
//
//	ffgen [flags] [packages]
//
// See docs/ffgen.md for the directives. Exit status: 0 on success, 1 for a
// mistake in the code (or, with -check, stale or orphaned files or
// packages that do not build), 2 for a usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/ffgen/ffgen/internal/generator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ffgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	types := fs.String("type", "", "comma-separated interfaces to generate (default: every //ff:service interface)")
	output := fs.String("output", "", "output file (default: <snake_case interface>_ff.go beside the interface, <source>_<snake_case>_ff.go for a source with a build constraint); only with one interface")
	tags := fs.String("tags", "", "comma-separated build tags to load the packages with")
	check := fs.Bool("check", false, "write nothing; exit 1 naming the files that would change or are orphaned, or when the packages do not build")
	allowBreaking := fs.Bool("allow-breaking", false, "accept changes that break the schema recorded in the generated files (field kinds, modes, entities, declared errors) instead of reporting them")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ffgen [flags] [packages]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return generator.ExitOK
		}
		return generator.ExitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, "ffgen", currentVersion())
		return generator.ExitOK
	}
	cfg := &generator.Config{
		Patterns:      fs.Args(),
		Output:        *output,
		Tags:          *tags,
		Check:         *check,
		AllowBreaking: *allowBreaking,
	}
	if *types != "" {
		for t := range strings.SplitSeq(*types, ",") {
			if t = strings.TrimSpace(t); t != "" {
				cfg.Types = append(cfg.Types, t)
			}
		}
	}
	return generator.Run(ctx, cfg, stdout, stderr)
}
