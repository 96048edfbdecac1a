// Package cli holds what the bank commands share: flags that default to
// environment variables, logging, gossip presets, and the node report that
// banknode serves and bankload audits.
package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ffgen/ffgen/runtime/cluster"
)

// Flags defines flags whose defaults come from environment variables, so
// that a node can be configured either way; a flag given on the command
// line wins. Malformed environment values are collected in Errs.
type Flags struct {
	*flag.FlagSet
	Errs []error
	// Envs maps each flag that has an environment variable to its name,
	// so that deployment files can be checked against the flags.
	Envs map[string]string
}

// NewFlags returns flags for the named command, exiting on -h and on errors.
func NewFlags(name, usage string) *Flags {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\n%s\nFlags (environment variable in brackets):\n", name, usage)
		fs.PrintDefaults()
	}
	return &Flags{FlagSet: fs, Envs: map[string]string{}}
}

// lookup returns $env's value if set and not empty, recording it as
// flag name's variable.
func (f *Flags) lookup(name, env string) (string, bool) {
	if env == "" {
		return "", false
	}
	f.Envs[name] = env
	v, ok := os.LookupEnv(env)
	return v, ok && v != ""
}

func envHelp(env, help string) string {
	if env == "" {
		return help
	}
	return help + " [" + env + "]"
}

// String defines a string flag defaulting to $env, else def.
func (f *Flags) String(name, env, def, help string) *string {
	if v, ok := f.lookup(name, env); ok {
		def = v
	}
	return f.FlagSet.String(name, def, envHelp(env, help))
}

// Duration defines a duration flag defaulting to $env, else def.
func (f *Flags) Duration(name, env string, def time.Duration, help string) *time.Duration {
	if v, ok := f.lookup(name, env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			f.Errs = append(f.Errs, fmt.Errorf("%s=%q: not a duration", env, v))
		} else {
			def = d
		}
	}
	return f.FlagSet.Duration(name, def, envHelp(env, help))
}

// Int defines an int flag defaulting to $env, else def.
func (f *Flags) Int(name, env string, def int, help string) *int {
	if v, ok := f.lookup(name, env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			f.Errs = append(f.Errs, fmt.Errorf("%s=%q: not an integer", env, v))
		} else {
			def = n
		}
	}
	return f.FlagSet.Int(name, def, envHelp(env, help))
}

// Bool defines a bool flag defaulting to $env ("true", "1", ...), else def.
func (f *Flags) Bool(name, env string, def bool, help string) *bool {
	if v, ok := f.lookup(name, env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			f.Errs = append(f.Errs, fmt.Errorf("%s=%q: not a boolean", env, v))
		} else {
			def = b
		}
	}
	return f.FlagSet.Bool(name, def, envHelp(env, help))
}

// List splits a comma-separated list, dropping empty items.
func List(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Logger returns a text logger on stderr at the named level.
func Logger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// ClusterConfig returns the cluster defaults for a gossip preset name:
// "lan" declares a crashed node dead after several seconds, "local" after
// one or two, which also declares a node dead that is frozen for a second.
func ClusterConfig(preset string) (cluster.Config, error) {
	switch preset {
	case "lan":
		return cluster.DefaultLANConfig(), nil
	case "local":
		return cluster.DefaultLocalConfig(), nil
	}
	return cluster.Config{}, fmt.Errorf("gossip preset %q: want lan or local", preset)
}
