package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/internal/memnet"
	"github.com/ffgen/ffgen/runtime/transport"
)

func validSettings() Settings {
	s := DefaultSettings()
	s.Groups = []string{"a", "b", "c"}
	return s
}

func TestDefaultSettings(t *testing.T) {
	s := DefaultSettings()
	want := Settings{
		HeartbeatInterval: 90 * time.Millisecond,
		HeartbeatTimeout:  200 * time.Millisecond,
		AttemptTimeout:    5 * time.Second,
		OperationTimeout:  10 * time.Second,
		MaxFailovers:      1,
		SuspectFor:        10 * time.Second,
		Budget:            BudgetSettings{Rate: 100, Burst: 50},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("DefaultSettings (-want +got):\n%s", diff)
	}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "at least two failure groups") {
		t.Fatalf("defaults without groups: Validate() = %v, want the groups error", err)
	}
	if err := validSettings().Validate(); err != nil {
		t.Fatalf("defaults with groups: Validate() = %v", err)
	}
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Settings)
		want   []string // substrings, one per expected error; nil: valid
	}{
		{"defaults", func(*Settings) {}, nil},
		{"two groups", func(s *Settings) { s.Groups = []string{"x", "y"} }, nil},
		{"one group", func(s *Settings) { s.Groups = []string{"x"} }, []string{`Groups ["x"]: at least two`}},
		{"no groups", func(s *Settings) { s.Groups = nil }, []string{"at least two failure groups"}},
		{"empty group", func(s *Settings) { s.Groups = []string{"x", ""} }, []string{"Groups[1] is empty"}},
		{"duplicate group", func(s *Settings) { s.Groups = []string{"x", "y", "x"} },
			[]string{`Groups[2] "x" duplicates Groups[0]`}},
		{"zero interval", func(s *Settings) { s.HeartbeatInterval = 0 }, []string{"HeartbeatInterval (0s) must be positive"}},
		{"zero heartbeat timeout", func(s *Settings) { s.HeartbeatTimeout = 0 }, []string{"HeartbeatTimeout (0s) must be positive"}},
		{"timeout below interval", func(s *Settings) { s.HeartbeatTimeout = 80 * time.Millisecond },
			[]string{"HeartbeatTimeout (80ms) must be at least twice HeartbeatInterval (90ms)"}},
		{"timeout under twice interval", func(s *Settings) { s.HeartbeatTimeout = 179 * time.Millisecond },
			[]string{"HeartbeatTimeout (179ms) must be at least twice HeartbeatInterval (90ms)"}},
		{"timeout exactly twice interval", func(s *Settings) { s.HeartbeatTimeout = 180 * time.Millisecond }, nil},
		{"huge interval does not overflow", func(s *Settings) {
			s.HeartbeatInterval = 1<<62 + 1
			s.HeartbeatTimeout = 1<<63 - 1
			s.AttemptTimeout = 1<<63 - 1
			s.OperationTimeout = 1<<63 - 1
		}, []string{"must be at least twice", "AttemptTimeout"}},
		{"attempt equals heartbeat timeout", func(s *Settings) { s.AttemptTimeout = 200 * time.Millisecond },
			[]string{"AttemptTimeout (200ms) must be above HeartbeatTimeout (200ms)"}},
		{"operation below attempt", func(s *Settings) { s.OperationTimeout = 4 * time.Second },
			[]string{"OperationTimeout (4s) must be at least AttemptTimeout (5s)"}},
		{"operation equals attempt", func(s *Settings) { s.OperationTimeout = 5 * time.Second }, nil},
		{"negative max failovers", func(s *Settings) { s.MaxFailovers = -1 }, []string{"MaxFailovers (-1) must not be negative"}},
		{"zero max failovers", func(s *Settings) { s.MaxFailovers = 0 }, nil},
		{"max failovers above groups", func(s *Settings) { s.MaxFailovers = 7 }, nil},
		{"negative suspect", func(s *Settings) { s.SuspectFor = -time.Second }, []string{"SuspectFor (-1s) must not be negative"}},
		{"zero suspect", func(s *Settings) { s.SuspectFor = 0 }, nil},
		{"no budget", func(s *Settings) { s.Budget = BudgetSettings{} }, nil},
		{"negative rate", func(s *Settings) { s.Budget.Rate = -1 }, []string{"Budget.Rate (-1)"}},
		{"zero burst", func(s *Settings) { s.Budget.Burst = 0 }, []string{"Budget.Burst (0) must be at least 1"}},
		{"negative burst", func(s *Settings) { s.Budget.Burst = -2 },
			[]string{"Budget.Burst (-2) must be at least 1", "Budget.Burst (-2) must not be negative"}},
		{"negative wait", func(s *Settings) { s.Budget.Wait = -time.Millisecond }, []string{"Budget.Wait (-1ms)"}},
		{"everything at once", func(s *Settings) {
			s.Groups = []string{"x"}
			s.HeartbeatInterval = 100 * time.Millisecond
			s.HeartbeatTimeout = 150 * time.Millisecond
			s.AttemptTimeout = 100 * time.Millisecond
			s.OperationTimeout = 50 * time.Millisecond
			s.MaxFailovers = -3
		}, []string{"Groups", "HeartbeatTimeout (150ms)", "AttemptTimeout (100ms)", "OperationTimeout (50ms)", "MaxFailovers (-3)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSettings()
			tt.modify(&s)
			err := s.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSettings) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalidSettings", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("Validate() gave %d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("error %d = %q, want it to contain %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestSettingsForMethod(t *testing.T) {
	base := validSettings()
	three := 3
	m := &MethodDesc{Service: "bank.Accounts", Name: "Withdraw", Settings: MethodSettings{
		AttemptTimeout:   2 * time.Second,
		OperationTimeout: 4 * time.Second,
		HeartbeatTimeout: 300 * time.Millisecond,
		MaxFailovers:     &three,
	}}
	got := base.forMethod(m)
	want := base
	want.AttemptTimeout, want.OperationTimeout, want.HeartbeatTimeout, want.MaxFailovers =
		2*time.Second, 4*time.Second, 300*time.Millisecond, 3
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("forMethod (-want +got):\n%s", diff)
	}
	if err := base.validateMethod(m); err != nil {
		t.Fatalf("validateMethod = %v", err)
	}

	// Zero overrides inherit; so does a nil method.
	if diff := cmp.Diff(base, base.forMethod(&MethodDesc{})); diff != "" {
		t.Errorf("forMethod(no overrides) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(base, base.forMethod(nil)); diff != "" {
		t.Errorf("forMethod(nil) (-want +got):\n%s", diff)
	}
	// An explicit zero MaxFailovers overrides.
	zero := 0
	if got := base.forMethod(&MethodDesc{Settings: MethodSettings{MaxFailovers: &zero}}).MaxFailovers; got != 0 {
		t.Errorf("MaxFailovers override 0: got %d", got)
	}
}

func TestSettingsValidateMethod(t *testing.T) {
	base := validSettings()
	tests := []struct {
		name string
		ms   MethodSettings
		want string
	}{
		{"attempt below heartbeat timeout", MethodSettings{AttemptTimeout: 150 * time.Millisecond},
			"method bank.Accounts.Withdraw: ffgen: invalid settings: AttemptTimeout (150ms) must be above HeartbeatTimeout (200ms)"},
		{"attempt above inherited operation", MethodSettings{AttemptTimeout: 20 * time.Second},
			"OperationTimeout (10s) must be at least AttemptTimeout (20s)"},
		{"heartbeat timeout under twice interval", MethodSettings{HeartbeatTimeout: 100 * time.Millisecond},
			"HeartbeatTimeout (100ms) must be at least twice HeartbeatInterval (90ms)"},
		{"negative max failovers", MethodSettings{MaxFailovers: new(-1)}, "MaxFailovers (-1)"},
		{"negative duration", MethodSettings{OperationTimeout: -time.Second}, "OperationTimeout (-1s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &MethodDesc{Service: "bank.Accounts", Name: "Withdraw", Settings: tt.ms}
			err := base.validateMethod(m)
			if !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validateMethod = %v, want an ErrInvalidSettings containing %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "method bank.Accounts.Withdraw: ") {
				t.Errorf("validateMethod = %q, want it to name the method", err)
			}
		})
	}
}

func TestSettingsFromEnvLookup(t *testing.T) {
	base := validSettings()
	tests := []struct {
		name    string
		env     map[string]string
		modify  func(*Settings)
		wantErr []string
	}{
		{"nothing set", nil, func(*Settings) {}, nil},
		{"empty values are ignored", map[string]string{EnvGroups: "", EnvHeartbeatTimeout: "  "}, func(*Settings) {}, nil},
		{"groups", map[string]string{EnvGroups: " eu-1, eu-2 ,eu-3"},
			func(s *Settings) { s.Groups = []string{"eu-1", "eu-2", "eu-3"} }, nil},
		{"groups keep empty entries for Validate", map[string]string{EnvGroups: "x,,y"},
			func(s *Settings) { s.Groups = []string{"x", "", "y"} }, nil},
		{"heartbeat interval", map[string]string{EnvHeartbeatInterval: "50ms"},
			func(s *Settings) { s.HeartbeatInterval = 50 * time.Millisecond }, nil},
		{"heartbeat timeout", map[string]string{EnvHeartbeatTimeout: "1s"},
			func(s *Settings) { s.HeartbeatTimeout = time.Second }, nil},
		{"attempt timeout", map[string]string{EnvAttemptTimeout: "2.5s"},
			func(s *Settings) { s.AttemptTimeout = 2500 * time.Millisecond }, nil},
		{"operation timeout", map[string]string{EnvOperationTimeout: "1m"},
			func(s *Settings) { s.OperationTimeout = time.Minute }, nil},
		{"max failovers", map[string]string{EnvMaxFailovers: "4"}, func(s *Settings) { s.MaxFailovers = 4 }, nil},
		{"suspect for", map[string]string{EnvSuspectFor: "0s"}, func(s *Settings) { s.SuspectFor = 0 }, nil},
		{"budget rate", map[string]string{EnvBudgetRate: "12.5"}, func(s *Settings) { s.Budget.Rate = 12.5 }, nil},
		{"budget burst", map[string]string{EnvBudgetBurst: "7"}, func(s *Settings) { s.Budget.Burst = 7 }, nil},
		{"budget wait", map[string]string{EnvBudgetWait: "20ms"}, func(s *Settings) { s.Budget.Wait = 20 * time.Millisecond }, nil},
		{"bad heartbeat interval", map[string]string{EnvHeartbeatInterval: "90"}, nil,
			[]string{`FFGEN_HEARTBEAT_INTERVAL="90": not a duration`}},
		{"bad heartbeat timeout", map[string]string{EnvHeartbeatTimeout: "soon"}, nil, []string{"FFGEN_HEARTBEAT_TIMEOUT"}},
		{"bad attempt timeout", map[string]string{EnvAttemptTimeout: "5 s"}, nil, []string{"FFGEN_ATTEMPT_TIMEOUT"}},
		{"bad operation timeout", map[string]string{EnvOperationTimeout: "x"}, nil, []string{"FFGEN_OPERATION_TIMEOUT"}},
		{"bad max failovers", map[string]string{EnvMaxFailovers: "1.5"}, nil, []string{`FFGEN_MAX_FAILOVERS="1.5": not an integer`}},
		{"bad suspect for", map[string]string{EnvSuspectFor: "5"}, nil, []string{"FFGEN_SUSPECT_FOR"}},
		{"bad budget rate", map[string]string{EnvBudgetRate: "fast"}, nil, []string{"FFGEN_FAILOVER_BUDGET_RATE"}},
		{"infinite budget rate", map[string]string{EnvBudgetRate: "Inf"}, nil, []string{"FFGEN_FAILOVER_BUDGET_RATE"}},
		{"bad budget burst", map[string]string{EnvBudgetBurst: "lots"}, nil, []string{"FFGEN_FAILOVER_BUDGET_BURST"}},
		{"bad budget wait", map[string]string{EnvBudgetWait: "-"}, nil, []string{"FFGEN_FAILOVER_BUDGET_WAIT"}},
		{"all bad at once", map[string]string{EnvHeartbeatInterval: "a", EnvMaxFailovers: "b", EnvBudgetRate: "c"}, nil,
			[]string{"FFGEN_HEARTBEAT_INTERVAL", "FFGEN_MAX_FAILOVERS", "FFGEN_FAILOVER_BUDGET_RATE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, err := settingsFromLookup(base, lookup)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("got no error, want %q", tt.wantErr)
				}
				lines := strings.Split(err.Error(), "\n")
				if len(lines) != len(tt.wantErr) {
					t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(tt.wantErr), err)
				}
				for i, w := range tt.wantErr {
					if !strings.Contains(lines[i], w) {
						t.Errorf("error %d = %q, want it to contain %q", i, lines[i], w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			want := base
			tt.modify(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSettingsFromEnv(t *testing.T) {
	t.Setenv(EnvGroups, "z1,z2")
	t.Setenv(EnvHeartbeatInterval, "30ms")
	t.Setenv(EnvHeartbeatTimeout, "70ms")
	t.Setenv(EnvMaxFailovers, "2")
	got, err := SettingsFromEnv(DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultSettings()
	want.Groups = []string{"z1", "z2"}
	want.HeartbeatInterval, want.HeartbeatTimeout, want.MaxFailovers = 30*time.Millisecond, 70*time.Millisecond, 2
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("SettingsFromEnv (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}

	t.Setenv(EnvAttemptTimeout, "later")
	if _, err := SettingsFromEnv(DefaultSettings()); err == nil || !strings.Contains(err.Error(), EnvAttemptTimeout) {
		t.Fatalf("bad %s: err = %v", EnvAttemptTimeout, err)
	}
}

// A method whose overrides conflict with a client's settings fails every
// call of its own, naming it; the client is made, and the methods of the
// same service and of others that agree with the settings are called as
// usual: a service the client never calls cannot stop it.
func TestClientValidatesEachMethodItCalls(t *testing.T) {
	none := func(codec.Message, []string) []string { return nil }
	short := &MethodDesc{Service: "p.S", Name: "Short", Settings: MethodSettings{OperationTimeout: time.Millisecond}, Entities: none}
	fine := &MethodDesc{Service: "p.S", Name: "Fine", Settings: MethodSettings{OperationTimeout: 20 * time.Second}, Entities: none}
	net := memnet.NewNetwork()
	cfg := ClientConfig{
		Transport:  net.Transport(transport.Config{Node: "c", Group: "clients"}),
		Membership: NewStaticMembership(),
		Settings:   validSettings(),
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient = %v, want it made whatever the methods say", err)
	}
	defer c.Close()
	for range 2 { // the verdict is cached, and kept
		err := c.Invoke(context.Background(), short, nil, nil)
		if !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), "method p.S.Short: ") {
			t.Fatalf("Short = %v, want ErrInvalidSettings naming p.S.Short", err)
		}
	}
	// Fine's settings agree: its call goes on, to the entity check.
	if err := c.Invoke(context.Background(), fine, nil, nil); errors.Is(err, ErrInvalidSettings) || err == nil || !strings.Contains(err.Error(), "no entity ID") {
		t.Fatalf("Fine = %v, want it past the settings (no entity ID)", err)
	}
	// The same method with settings it agrees with.
	cfg.Settings.AttemptTimeout, cfg.Settings.OperationTimeout = 500*time.Microsecond, time.Second
	cfg.Settings.HeartbeatInterval, cfg.Settings.HeartbeatTimeout = 100*time.Microsecond, 200*time.Microsecond
	agreeing, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient with agreeing settings = %v", err)
	}
	defer agreeing.Close()
	if err := agreeing.Invoke(context.Background(), short, nil, nil); err == nil || errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), "no entity ID") {
		t.Fatalf("Short with agreeing settings = %v, want it past the settings (no entity ID)", err)
	}
}

func TestRegisterValidatesOverrides(t *testing.T) {
	s := NewServer(ServerConfig{})
	bad := &ServiceDesc{Name: "p.S", Methods: []*MethodDesc{{
		Service: "p.S", Name: "M",
		Settings: MethodSettings{AttemptTimeout: 2 * time.Second, OperationTimeout: time.Second},
		NewArgs:  func() codec.Message { return nil },
		Handle:   func(context.Context, any, codec.Message) (codec.Message, error) { return nil, nil },
	}}}
	err := s.Register(bad, struct{}{})
	if !errors.Is(err, ErrInvalidSettings) || !strings.Contains(err.Error(), "method p.S.M: ") {
		t.Fatalf("Register = %v, want ErrInvalidSettings naming p.S.M", err)
	}
	if got := s.Services(); len(got) != 0 {
		t.Errorf("the rejected service is registered: %v", got)
	}
}

// A method whose Service names another service would be registered under
// one name and called under the other: Register refuses it.
func TestRegisterChecksTheMethodsService(t *testing.T) {
	s := NewServer(ServerConfig{})
	bad := &ServiceDesc{Name: "p.S", Methods: []*MethodDesc{{
		Service: "p.Other", Name: "M",
		NewArgs: func() codec.Message { return nil },
		Handle:  func(context.Context, any, codec.Message) (codec.Message, error) { return nil, nil },
	}}}
	err := s.Register(bad, struct{}{})
	if err == nil || !strings.Contains(err.Error(), `method M says it belongs to service "p.Other"`) {
		t.Fatalf("Register = %v, want the mismatch named", err)
	}
	if got := s.Services(); len(got) != 0 {
		t.Errorf("the rejected service is registered: %v", got)
	}
}
