package runtime

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ffgen/ffgen/internal/timeouts"
)

// ErrInvalidSettings is matched (errors.Is) by every error that
// Settings.Validate reports, and by the error of every call of a method
// whose overrides conflict with the client's settings.
var ErrInvalidSettings = errors.New("ffgen: invalid settings")

// Settings configure a client's failover behaviour. The defaults are those
// of Akka Fast Failover; DefaultSettings returns them.
type Settings struct {
	// Groups are the configured failure groups. Every node must list the
	// same groups in the same order: routing depends on it. At least two.
	Groups []string
	// HeartbeatInterval is how often a server sends heartbeats for a
	// running attempt. Default 90ms.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long the client waits for a heartbeat before
	// it fails over; at least twice HeartbeatInterval so that one late
	// heartbeat does not cause a failover. Default 200ms.
	HeartbeatTimeout time.Duration
	// AttemptTimeout bounds one attempt even while heartbeats arrive, for
	// handlers that are alive but stuck. Above HeartbeatTimeout, or the
	// heartbeat timeout would never fire. Default 5s.
	AttemptTimeout time.Duration
	// OperationTimeout bounds the whole operation, every attempt included.
	// At least AttemptTimeout. Default 10s.
	OperationTimeout time.Duration
	// MaxFailovers is how many times an operation may fail over: 1 means
	// at most two attempts. It may exceed len(Groups)-1; the groups are
	// then tried again in the same order. Default 1.
	MaxFailovers int
	// SuspectFor is how long a node whose connection broke or could not
	// be dialed is skipped locally, so that the next operations go
	// straight to the next-best node instead of each paying for it again,
	// and the longest a node that keeps timing out is skipped (a single
	// timeout skips it for four heartbeat timeouts, each repeat twice as
	// long). It should cover the seconds the membership protocol needs to
	// declare a dead node dead. Zero disables suspicion. Default 10s:
	// longer than memberlist's LAN preset takes to declare a crashed node
	// dead (6.8 s at worst on a small cluster, measured in
	// docs/cluster.md), so that a killed node is not tried, and paid for,
	// again before the membership drops it. A node suspected for a broken
	// connection or a failed dial is redialed in the background, at once
	// when a node that hears from it redirects an attempt there, and the
	// first dial that connects ends its suspicion.
	SuspectFor time.Duration
	// Budget limits the rate of failovers; see BudgetSettings.
	Budget BudgetSettings
}

// Default settings, as in Akka Fast Failover.
const (
	DefaultHeartbeatInterval = timeouts.HeartbeatInterval
	DefaultHeartbeatTimeout  = timeouts.HeartbeatTimeout
	DefaultAttemptTimeout    = timeouts.Attempt
	DefaultOperationTimeout  = timeouts.Operation
	DefaultMaxFailovers      = 1
	DefaultSuspectFor        = 10 * time.Second
)

// DefaultSettings returns the default settings. Groups is empty: the caller
// sets it.
func DefaultSettings() Settings {
	return Settings{
		HeartbeatInterval: DefaultHeartbeatInterval,
		HeartbeatTimeout:  DefaultHeartbeatTimeout,
		AttemptTimeout:    DefaultAttemptTimeout,
		OperationTimeout:  DefaultOperationTimeout,
		MaxFailovers:      DefaultMaxFailovers,
		SuspectFor:        DefaultSuspectFor,
		Budget:            DefaultBudgetSettings(),
	}
}

// invalid returns an error matching ErrInvalidSettings.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSettings, fmt.Sprintf(format, args...))
}

// Validate checks the settings and reports every broken rule at once
// (errors.Join); each error matches ErrInvalidSettings.
func (s Settings) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalid(format, args...)) }

	if len(s.Groups) < 2 {
		add("Groups %q: at least two failure groups are required", s.Groups)
	}
	seen := make(map[string]int, len(s.Groups))
	for i, g := range s.Groups {
		if g == "" {
			add("Groups[%d] is empty", i)
			continue
		}
		if j, dup := seen[g]; dup {
			add("Groups[%d] %q duplicates Groups[%d]", i, g, j)
			continue
		}
		seen[g] = i
	}

	for _, p := range timeouts.Check(s.HeartbeatInterval, s.HeartbeatTimeout, s.AttemptTimeout, s.OperationTimeout) {
		add("%s", p)
	}
	if s.MaxFailovers < 0 {
		add("MaxFailovers (%d) must not be negative", s.MaxFailovers)
	}
	if s.SuspectFor < 0 {
		add("SuspectFor (%v) must not be negative", s.SuspectFor)
	}
	errs = append(errs, s.Budget.validate()...)
	return errors.Join(errs...)
}

// forMethod returns the settings with m's overrides applied: a zero
// duration and a nil MaxFailovers inherit s. It does not validate; the
// client checks each method once with validateMethod.
func (s Settings) forMethod(m *MethodDesc) Settings {
	if m == nil {
		return s
	}
	o := m.Settings
	if o.AttemptTimeout != 0 {
		s.AttemptTimeout = o.AttemptTimeout
	}
	if o.OperationTimeout != 0 {
		s.OperationTimeout = o.OperationTimeout
	}
	if o.HeartbeatTimeout != 0 {
		s.HeartbeatTimeout = o.HeartbeatTimeout
	}
	if o.MaxFailovers != nil {
		s.MaxFailovers = *o.MaxFailovers
	}
	return s
}

// validateMethod validates s.forMethod(m), so that an override that breaks
// a rule (say an attempt timeout below the client's heartbeat timeout) is
// reported with the method's name.
func (s Settings) validateMethod(m *MethodDesc) error {
	if err := s.forMethod(m).Validate(); err != nil {
		if m == nil {
			return err
		}
		return fmt.Errorf("method %s.%s: %w", m.Service, m.Name, err)
	}
	return nil
}

// validate checks what a method's overrides say on their own, whatever
// settings they are merged with: a server registering a service knows no
// client's settings.
func (o MethodSettings) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, invalid(format, args...)) }
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"AttemptTimeout", o.AttemptTimeout}, {"OperationTimeout", o.OperationTimeout}, {"HeartbeatTimeout", o.HeartbeatTimeout}} {
		if d.v < 0 {
			add("%s (%v) must not be negative", d.name, d.v)
		}
	}
	if o.MaxFailovers != nil && *o.MaxFailovers < 0 {
		add("MaxFailovers (%d) must not be negative", *o.MaxFailovers)
	}
	if o.AttemptTimeout > 0 && o.OperationTimeout > 0 && o.OperationTimeout < o.AttemptTimeout {
		add("OperationTimeout (%v) must be at least AttemptTimeout (%v)", o.OperationTimeout, o.AttemptTimeout)
	}
	if o.AttemptTimeout > 0 && o.HeartbeatTimeout > 0 && o.AttemptTimeout <= o.HeartbeatTimeout {
		add("AttemptTimeout (%v) must be above HeartbeatTimeout (%v)", o.AttemptTimeout, o.HeartbeatTimeout)
	}
	return errors.Join(errs...)
}

// validateOverrides checks the overrides of every method of svc on their
// own; Register calls it.
func validateOverrides(svc *ServiceDesc) error {
	var errs []error
	for _, m := range svc.Methods {
		if m == nil {
			continue
		}
		if err := m.Settings.validate(); err != nil {
			errs = append(errs, fmt.Errorf("method %s.%s: %w", svc.Name, m.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Environment variables read by SettingsFromEnv.
const (
	EnvGroups            = "FFGEN_GROUPS"             // comma-separated failure groups
	EnvHeartbeatInterval = "FFGEN_HEARTBEAT_INTERVAL" // a time.ParseDuration value, e.g. "90ms"
	EnvHeartbeatTimeout  = "FFGEN_HEARTBEAT_TIMEOUT"  // duration
	EnvAttemptTimeout    = "FFGEN_ATTEMPT_TIMEOUT"    // duration
	EnvOperationTimeout  = "FFGEN_OPERATION_TIMEOUT"  // duration
	EnvMaxFailovers      = "FFGEN_MAX_FAILOVERS"      // integer
	EnvSuspectFor        = "FFGEN_SUSPECT_FOR"        // duration
	EnvBudgetRate        = "FFGEN_FAILOVER_BUDGET_RATE"
	EnvBudgetBurst       = "FFGEN_FAILOVER_BUDGET_BURST"
	EnvBudgetWait        = "FFGEN_FAILOVER_BUDGET_WAIT" // duration
)

// SettingsFromEnv returns base with the FFGEN_* environment variables
// (EnvGroups and the others) applied. An unset or empty variable keeps
// base's value. Every malformed value is reported, naming its variable;
// the result is not validated, so the caller may adjust it before calling
// Validate.
func SettingsFromEnv(base Settings) (Settings, error) {
	return settingsFromLookup(base, os.LookupEnv)
}

func settingsFromLookup(s Settings, lookup func(string) (string, bool)) (Settings, error) {
	var errs []error
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	duration := func(name string, dst *time.Duration) {
		if v, ok := get(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not a duration (e.g. 200ms, 5s)", name, v))
				return
			}
			*dst = d
		}
	}
	integer := func(name string, dst *int) {
		if v, ok := get(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not an integer", name, v))
				return
			}
			*dst = n
		}
	}

	if v, ok := get(EnvGroups); ok {
		groups := strings.Split(v, ",")
		for i := range groups {
			groups[i] = strings.TrimSpace(groups[i])
		}
		s.Groups = groups
	}
	duration(EnvHeartbeatInterval, &s.HeartbeatInterval)
	duration(EnvHeartbeatTimeout, &s.HeartbeatTimeout)
	duration(EnvAttemptTimeout, &s.AttemptTimeout)
	duration(EnvOperationTimeout, &s.OperationTimeout)
	integer(EnvMaxFailovers, &s.MaxFailovers)
	duration(EnvSuspectFor, &s.SuspectFor)
	if v, ok := get(EnvBudgetRate); ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) || math.IsInf(r, 0) {
			errs = append(errs, fmt.Errorf("%s=%q: not a finite number", EnvBudgetRate, v))
		} else {
			s.Budget.Rate = r
		}
	}
	integer(EnvBudgetBurst, &s.Budget.Burst)
	duration(EnvBudgetWait, &s.Budget.Wait)
	return s, errors.Join(errs...)
}
