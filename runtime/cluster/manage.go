package cluster

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffgen/ffgen/runtime"
)

// MemberSource lists the members; *Cluster implements it.
type MemberSource interface {
	AllMembers() []MemberStatus
	Member(name string) (MemberStatus, bool)
	Joined() bool
}

// MemberOperator carries out leave and down; *Cluster implements it.
// Errors wrapping ErrUnknownMember, ErrBadOperation and ErrNotLocal map to
// 404, 400 and 409.
type MemberOperator interface {
	Operate(name string, op Operation) error
}

// ReplicaSource reports replicated services; *runtime.Server implements it.
type ReplicaSource interface {
	Replication() []runtime.ReplicaStatus
}

// ReplicaRemover is a ReplicaSource that can also take a node out of a
// replicated service's raft group (runtime.Server is one): what an
// operator does for a node that is gone for good.
type ReplicaRemover interface {
	RemoveReplica(ctx context.Context, service, node string) error
}

// ManagementConfig configures the management endpoints.
type ManagementConfig struct {
	Members  MemberSource   // required
	Operator MemberOperator // nil: operations answer 501
	// Metrics is served on /metrics (*cluster.Stats is one); nil: /metrics
	// has the Go, process, membership and operation gauges only.
	Metrics prometheus.Collector
	// Gatherer, if set, adds its families to /metrics: an application's
	// own registry, say. A family it shares with the built-in ones makes
	// /metrics answer 500.
	Gatherer prometheus.Gatherer
	// DisablePprof turns off the net/http/pprof handlers under
	// /debug/pprof/, which are otherwise served under the same token and
	// address rules as every other route.
	DisablePprof bool
	Ops          []runtime.InFlighter
	// Replicas reports the node's replicated services (*runtime.Server
	// does): /health/ready fails while one is catching up, and
	// /cluster/replicas lists their state and any divergence.
	Replicas ReplicaSource

	// ReadWrite enables leave and down, and a replica's removal; off,
	// they answer 403.
	ReadWrite bool
	// Token, if set, is required on every request as
	// "Authorization: Bearer <token>", except for the static files of the
	// cluster page, which carry no data.
	Token string
	// PublicHealth serves /health/alive and /health/ready without the
	// token, for probes that cannot send one (a Kubernetes httpGet probe
	// takes no secret); a not-ready answer then gives its reason only to
	// requests that carry the token.
	PublicHealth bool
	// Groups are the failure groups /health/ready requires a live member in.
	Groups []string
	// Routes mounts extra read-only endpoints beside the built-in ones,
	// behind the same token. Keys are http.ServeMux patterns of the form
	// "GET /path" (GET also answers HEAD), without a host; a path may not
	// start with a built-in route's first segment (/cluster, /health,
	// /metrics, /ops, /debug), so that no extra route takes a request from a
	// built-in one, now or when routes are added there. See Validate.
	Routes map[string]http.Handler
}

// ErrBadRoute is returned for an extra management route that is malformed,
// not read-only, reserved, or in conflict with another route.
var ErrBadRoute = errors.New("cluster: bad management route")

// Validate reports what NewManagement would panic on: a missing Members or
// an extra route that Routes does not allow (wrapping ErrBadRoute).
func (c ManagementConfig) Validate() error {
	_, err := newManagement(c)
	return err
}

// NewManagement returns the management API:
//
//	GET    /cluster/members          every known member with its state
//	GET    /cluster/members/{name}   one member
//	PUT    /cluster/members/{name}   {"operation":"leave"|"down"} (ReadWrite only)
//	POST   /cluster/members/{name}   same as PUT
//	DELETE /cluster/members/{name}   leave (ReadWrite only)
//	GET    /health/alive             200 while the process serves HTTP
//	GET    /cluster/replicas         the replicated services on this node: whether
//	                                 it serves them and why not, role, leader,
//	                                 term, indexes, voters and learners
//	DELETE /cluster/replicas/{service}/voters/{name}
//	                                 take a node gone for good out of the
//	                                 service's raft group (ReadWrite only; ask
//	                                 the leader)
//	GET    /health/ready             200 when joined, every group in Groups has a
//	                                 live member and no replica is catching up,
//	                                 else 503 with the reason:
//	                                 {"ready":false,"error":"..."}
//	GET    /metrics                  Prometheus exposition (client_golang)
//	GET    /ops                      in-flight operations as JSON
//	GET    /debug/pprof/...          net/http/pprof, unless DisablePprof
//	GET    /cluster/page/            the live cluster page (HTML, no token
//	                                 needed: it holds no data and sends the
//	                                 token on its own requests)
//	GET    /                         a redirect to the page, no token needed
//
// plus cfg.Routes. Errors are JSON {"error": "..."}.
//
// NewManagement panics, as http.ServeMux.Handle does, if cfg is invalid;
// cfg.Validate reports it as an error, and ServeManagement returns it.
func NewManagement(cfg ManagementConfig) http.Handler {
	h, err := newManagement(cfg)
	if err != nil {
		panic(err)
	}
	return h
}

type builtinRoute struct {
	pattern string
	handle  func(*management, http.ResponseWriter, *http.Request)
}

var builtinRoutes = []builtinRoute{
	{"GET /cluster/members", (*management).members},
	{"GET /cluster/members/{name}", (*management).member},
	{"PUT /cluster/members/{name}", (*management).operate},
	{"POST /cluster/members/{name}", (*management).operate},
	{"DELETE /cluster/members/{name}", (*management).operate},
	{"GET /cluster/replicas", (*management).replicas},
	{"DELETE /cluster/replicas/{service}/voters/{name}", (*management).removeReplica},
	{"GET /health/alive", (*management).alive},
	{"GET /health/ready", (*management).ready},
	{"GET /metrics", (*management).metrics},
	{"GET /ops", (*management).ops},
	{pagePattern, (*management).page},
	{rootPattern, (*management).root},
	{"GET /debug/pprof/", (*management).pprof},
}

func newManagement(cfg ManagementConfig) (http.Handler, error) {
	if cfg.Members == nil {
		return nil, errors.New("cluster: ManagementConfig.Members is required")
	}
	m := &management{cfg: cfg}
	g, err := gatherer(cfg, &m.reports)
	if err != nil {
		return nil, err
	}
	m.gatherer = g
	mux := http.NewServeMux()
	for _, r := range builtinRoutes {
		mux.HandleFunc(r.pattern, func(w http.ResponseWriter, req *http.Request) { r.handle(m, w, req) })
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	// Sorted, so that the same config always reports the same error.
	for _, pattern := range slices.Sorted(maps.Keys(cfg.Routes)) {
		if err := mountRoute(mux, pattern, cfg.Routes[pattern]); err != nil {
			return nil, err
		}
	}
	if cfg.Token == "" {
		return mux, nil
	}
	return bearer(cfg.Token, mux, func(r *http.Request) bool {
		return isPage(mux, r) || cfg.PublicHealth && isHealth(r)
	}), nil
}

// mountRoute adds one extra route, leaving conflicts among wildcards to
// the mux, which is the authority on them.
func mountRoute(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	fields := strings.Fields(pattern)
	if len(fields) != 2 || fields[0] != http.MethodGet || !strings.HasPrefix(fields[1], "/") {
		return fmt.Errorf(`%w %q: want "GET /path": extra routes are read-only and take no host`, ErrBadRoute, pattern)
	}
	first, _, _ := strings.Cut(fields[1][1:], "/")
	if u, err := url.PathUnescape(first); err == nil {
		first = u
	}
	for _, r := range builtinRoutes {
		if reserved, _, _ := strings.Cut(strings.Fields(r.pattern)[1][1:], "/"); first == reserved {
			return fmt.Errorf("%w %q: /%s is reserved for the built-in routes", ErrBadRoute, pattern, reserved)
		}
	}
	if h == nil {
		return fmt.Errorf("%w %q: nil handler", ErrBadRoute, pattern)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %q: %v", ErrBadRoute, pattern, r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

type management struct {
	cfg      ManagementConfig
	gatherer prometheus.Gatherer
	reports  failoverReports // thin clients' failovers (FailoversHeader)
}

// isHealth reports whether r asks for a health route.
func isHealth(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/health/alive" || r.URL.Path == "/health/ready")
}

// hasToken reports whether r carries the token, or none is required.
func hasToken(token string, r *http.Request) bool {
	return token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) == 1
}

// bearer rejects requests without the token, comparing in constant time,
// except those public reports true for.
func bearer(token string, next http.Handler, public func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if public(r) {
			next.ServeHTTP(w, r)
			return
		}
		if !hasToken(token, r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ffgen"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (m *management) members(w http.ResponseWriter, r *http.Request) {
	if v := r.Header.Get(FailoversHeader); v != "" {
		m.reports.take(v, time.Now())
	}
	w.Header().Set(JoinedHeader, strconv.FormatBool(m.cfg.Members.Joined()))
	writeJSON(w, http.StatusOK, m.cfg.Members.AllMembers())
}

func (m *management) member(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	st, ok := m.cfg.Members.Member(name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown member %q", name))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// maxBody bounds an operation request; {"operation":"leave"} is tiny.
const maxBody = 1 << 10

func (m *management) operate(w http.ResponseWriter, r *http.Request) {
	if !m.cfg.ReadWrite {
		writeError(w, http.StatusForbidden, "management API is read-only")
		return
	}
	op := OpLeave
	if r.Method != http.MethodDelete {
		var req struct {
			Operation string `json:"operation"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(`body must be {"operation":"leave"|"down"}: %v`, err))
			return
		}
		op = Operation(strings.ToLower(req.Operation))
		if op != OpLeave && op != OpDown {
			writeError(w, http.StatusBadRequest, fmt.Sprintf(`operation must be "leave" or "down", got %q`, req.Operation))
			return
		}
	}
	if m.cfg.Operator == nil {
		writeError(w, http.StatusNotImplemented, "no member operator configured")
		return
	}
	name := r.PathValue("name")
	if err := m.cfg.Operator.Operate(name, op); err != nil {
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrUnknownMember):
			status = http.StatusNotFound
		case errors.Is(err, ErrBadOperation):
			status = http.StatusBadRequest
		case errors.Is(err, ErrNotLocal):
			status = http.StatusConflict
		}
		writeError(w, status, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"member": name, "operation": string(op)})
}

func (m *management) removeReplica(w http.ResponseWriter, r *http.Request) {
	if !m.cfg.ReadWrite {
		writeError(w, http.StatusForbidden, "management API is read-only")
		return
	}
	rm, ok := m.cfg.Replicas.(ReplicaRemover)
	if !ok {
		writeError(w, http.StatusNotImplemented, "no replicated services that can remove a node")
		return
	}
	service, name := r.PathValue("service"), r.PathValue("name")
	if err := rm.RemoveReplica(r.Context(), service, name); err != nil {
		status := http.StatusConflict // not the leader, not a member
		if errors.Is(err, runtime.ErrNotReplicated) {
			status = http.StatusNotFound
		}
		writeError(w, status, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"service": service, "removed": name})
}

func (m *management) alive(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"alive": true})
}

// readiness is the body of /health/ready; like every error body, a 503
// carries its reason in "error".
type readiness struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"error,omitempty"`
}

func (m *management) ready(w http.ResponseWriter, r *http.Request) {
	if reason := m.notReady(); reason != "" {
		if !hasToken(m.cfg.Token, r) {
			reason = "not ready (the reason needs the token)"
		}
		writeJSON(w, http.StatusServiceUnavailable, readiness{Reason: reason})
		return
	}
	writeJSON(w, http.StatusOK, readiness{Ready: true})
}

// notReady returns why the node is not ready, or "".
func (m *management) notReady() string {
	if !m.cfg.Members.Joined() {
		reason := "not joined to the cluster"
		if je, ok := m.cfg.Members.(interface{ JoinErr() error }); ok && je.JoinErr() != nil {
			reason += ": " + je.JoinErr().Error()
		}
		return reason
	}
	all := m.cfg.Members.AllMembers()
	var missing []string
	for _, g := range m.cfg.Groups {
		if !slices.ContainsFunc(all, func(s MemberStatus) bool { return s.Group == g && isLive(s.State) }) {
			missing = append(missing, g)
		}
	}
	if len(missing) > 0 {
		return "no live member in failure group(s) " + strings.Join(missing, ", ")
	}
	if m.cfg.Replicas != nil {
		for _, st := range m.cfg.Replicas.Replication() {
			if !st.Ready {
				return st.Service + ": " + st.NotReady
			}
		}
	}
	return ""
}

func (m *management) replicas(w http.ResponseWriter, r *http.Request) {
	out := []runtime.ReplicaStatus{}
	if m.cfg.Replicas != nil {
		out = m.cfg.Replicas.Replication()
	}
	writeJSON(w, http.StatusOK, out)
}

func (m *management) ops(w http.ResponseWriter, r *http.Request) {
	out := []runtime.OpInfo{}
	for _, src := range m.cfg.Ops {
		out = append(out, src.InFlight()...)
	}
	slices.SortStableFunc(out, func(a, b runtime.OpInfo) int { return a.Started.Compare(b.Started) })
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
