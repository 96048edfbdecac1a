package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime"
)

// Defaults of FollowConfig.
const (
	DefaultFollowInterval = time.Second
	DefaultFollowTimeout  = 2 * time.Second
	DefaultFollowResolve  = 30 * time.Second
)

// JoinedHeader is set by GET /cluster/members to "true" or "false": whether
// the answering node has joined a cluster. A follower does not take its
// membership from a node that has not, since such a node lists only itself.
const JoinedHeader = "Ffgen-Joined"

// maxMembersBody bounds one /cluster/members answer: thousands of members.
const maxMembersBody = 8 << 20

// FollowConfig configures a Follower.
type FollowConfig struct {
	// Nodes are management addresses of cluster nodes, in the forms
	// Resolve accepts: "host:port", "dns+name:port", "dnssrv+name".
	// Required. DNS entries are resolved again every ResolveEvery and
	// whenever no node answers.
	Nodes []string
	// Token is the nodes' management bearer token, if they require one.
	Token string
	// TLS, if set, reads over HTTPS with this client configuration (with
	// a certificate for nodes that require mutual TLS).
	TLS *tls.Config
	// Name names this client in the failovers it reports to the node it
	// reads from (FailoversHeader); default the host name and process ID.
	Name string

	Interval     time.Duration // between reads; 0: DefaultFollowInterval
	Timeout      time.Duration // per read; 0: DefaultFollowTimeout
	ResolveEvery time.Duration // DNS refresh; 0: DefaultFollowResolve
	Resolver     *net.Resolver // nil: net.DefaultResolver
	Logger       *slog.Logger  // nil discards
}

// Follower is the membership of a thin client: a process that routes
// operations by the cluster's membership without joining it, so it needs
// no gossip port and no failure group, and no node lists it. It reads the
// live members from one node's management API (GET /cluster/members)
// every Interval, sticking to that node while it answers and moving to
// another of Nodes when it does not. Until a node answers, Members is
// empty; Wait blocks until the groups a caller needs have members.
//
// It reads by polling rather than a stream because membership only picks
// where an operation's first attempt goes: a view up to Interval old
// costs at most one failover, which the client makes within a heartbeat
// timeout, while the membership itself takes seconds to declare a node
// dead. Polling a route every node already serves works through any HTTP
// proxy, with the token or mutual TLS the nodes already require, and
// keeps no connection or state on the nodes between reads.
//
// It implements runtime.Membership: pass it as ClientConfig.Membership.
type Follower struct {
	cfg  FollowConfig
	log  *slog.Logger
	http *http.Client
	live atomic.Pointer[[]runtime.Member]
	// failovers are those of the clients that use this membership,
	// reported to the node on every read.
	failovers failoverCounts

	mu     sync.Mutex
	subs   map[*subscriber]struct{} // nil once closed
	source string                   // the node last read from
	// joinedAt is each member's JoinedAt as source said it at the last
	// read (keepJoined).
	joinedAt map[string]time.Time
	err      error         // the last round's error; nil after a good read
	round    chan struct{} // closed and replaced after every round

	refresh   chan struct{} // Refresh's requests, one at most
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// refreshGap is the least time between a read and one that Refresh asks
// for: refusals that come in a storm cost the node one read a gap.
const refreshGap = 100 * time.Millisecond

var _ runtime.Membership = (*Follower)(nil)

// ErrNotManagement is the error of a follower whose every node address
// is a node's RPC port rather than its management address: a mistake
// that waiting does not mend, so Wait returns it at once.
var ErrNotManagement = errors.New("cluster: not a management address")

// speaksRPC reports whether addr is an ffgen RPC listener: the transport
// sends its hello as soon as it accepts a connection, before it reads
// anything, so the first bytes tell. It is asked only after a read of
// addr failed, to say why.
func speaksRPC(ctx context.Context, addr string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, min(timeout, time.Second))
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetReadDeadline(dl)
	}
	var buf [256]byte
	n := 0
	for {
		m, err := nc.Read(buf[n:])
		n += m
		if n >= 4 {
			size, lerr := frame.Len(buf[:n], len(buf)-4)
			if lerr != nil {
				return false
			}
			if n >= 4+size {
				f, derr := frame.Decode(buf[4 : 4+size])
				_, hello := f.(*frame.Hello)
				return derr == nil && hello
			}
		}
		if err != nil || n == len(buf) {
			return false
		}
	}
}

// Follow starts following the membership of the nodes in cfg. It returns
// at once; the first read runs in the background.
func Follow(cfg FollowConfig) (*Follower, error) {
	if len(slices.DeleteFunc(slices.Clone(cfg.Nodes), func(s string) bool { return s == "" })) == 0 {
		return nil, errors.New("cluster: FollowConfig.Nodes is empty: give the management address of at least one node")
	}
	if err := checkAddresses(cfg.Nodes); err != nil {
		return nil, fmt.Errorf("cluster: FollowConfig.Nodes: %w", err)
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.ResolveEvery < 0 {
		return nil, errors.New("cluster: FollowConfig durations must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultFollowInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultFollowTimeout
	}
	if cfg.ResolveEvery == 0 {
		cfg.ResolveEvery = DefaultFollowResolve
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS
	f := &Follower{
		cfg:     cfg,
		log:     lg,
		http:    &http.Client{Transport: tr, Timeout: cfg.Timeout},
		subs:    make(map[*subscriber]struct{}),
		round:   make(chan struct{}),
		refresh: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	f.live.Store(new([]runtime.Member))
	go f.loop()
	return f, nil
}

// Refresh asks for a read of the members now rather than at the next
// Interval, a read at most every 100 ms, and does not wait for it.
// runtime.Client calls it when a node refuses an attempt (it drains,
// catches up, or does not serve the method yet), which the view it routed
// by did not show: in a rolling deploy, a node restarted with a method
// the others lack is otherwise found only at the next read, and the
// calls of that method fail meanwhile if the only other node serving it
// drains.
func (f *Follower) Refresh() {
	select {
	case f.refresh <- struct{}{}:
	default:
	}
}

// ReportFailover counts a failover of a client that uses this
// membership; the counts go to the node on the next read (runtime.Client
// calls it).
func (f *Follower) ReportFailover(service, method string, reason runtime.Reason) {
	f.failovers.add(service, method, reason)
}

// Members returns the live members of the last good read, sorted by
// name. The caller must not modify it.
func (f *Follower) Members() []runtime.Member { return *f.live.Load() }

// Subscribe calls fn with the live members now, before returning, and
// then on its own goroutine after every change, one call at a time, as
// Cluster.Subscribe does.
func (f *Follower) Subscribe(fn func(members []runtime.Member)) (cancel func()) {
	s := &subscriber{fn: fn, pending: make(chan struct{}, 1), done: make(chan struct{})}
	f.mu.Lock()
	active := f.subs != nil
	if active {
		f.subs[s] = struct{}{}
	}
	f.mu.Unlock()
	fn(f.Members())
	if !active {
		return func() {}
	}
	go s.run(f.Members)
	return func() {
		f.mu.Lock()
		delete(f.subs, s)
		f.mu.Unlock()
		s.cancel()
	}
}

// Source returns the management address the view was last read from.
func (f *Follower) Source() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.source
}

// Err returns why the last round read nothing, or nil.
func (f *Follower) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Wait returns once every group in groups has a live member serving
// service (with no groups: once any member serves it), or ctx's error
// with what is still missing and the last read's error.
func (f *Follower) Wait(ctx context.Context, service string, groups []string) error {
	for {
		f.mu.Lock()
		round, lastErr := f.round, f.err
		f.mu.Unlock()
		members := f.Members()
		missing := missingGroups(members, service, groups)
		if len(groups) == 0 && !slices.ContainsFunc(members, func(m runtime.Member) bool { return m.Serves(service) }) {
			missing = []string{"any"}
		}
		if len(missing) == 0 {
			return nil
		}
		if len(members) == 0 && errors.Is(lastErr, ErrNotManagement) && onlyNotManagement(lastErr) {
			return fmt.Errorf("cluster: no member serving %s: %w", service, lastErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: no member serving %s in group(s) %v (last read: %v): %w", service, missing, lastErr, ctx.Err())
		case <-f.done:
			return ErrShutdown
		case <-round:
		}
	}
}

// onlyNotManagement reports whether every error a round joined is
// ErrNotManagement: every node given is an RPC port.
func onlyNotManagement(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !errors.Is(e, ErrNotManagement) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, ErrNotManagement)
}

// missingGroups returns the groups that have no member serving service.
func missingGroups(members []runtime.Member, service string, groups []string) []string {
	var missing []string
	for _, g := range groups {
		if !slices.ContainsFunc(members, func(m runtime.Member) bool { return m.Group == g && m.Serves(service) }) {
			missing = append(missing, g)
		}
	}
	return missing
}

// Close stops following; subscribers are not called again. It is safe to
// call twice.
func (f *Follower) Close() error {
	f.closeOnce.Do(func() {
		close(f.stop)
		<-f.done
		f.mu.Lock()
		subs := f.subs
		f.subs = nil
		f.mu.Unlock()
		for s := range subs {
			s.cancel()
		}
		f.http.CloseIdleConnections()
	})
	return nil
}

func (f *Follower) loop() {
	defer close(f.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.stop
		cancel()
	}()
	var addrs []string
	var resolved time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last time.Time // when the latest read began
	for {
		select {
		case <-f.stop:
			return
		case <-f.refresh:
			if wait := refreshGap - time.Since(last); wait > 0 {
				timer.Reset(wait)
				continue
			}
		case <-timer.C:
		}
		last = time.Now()
		if addrs == nil || time.Since(resolved) >= f.cfg.ResolveEvery {
			var err error
			addrs, err = Resolve(ctx, f.cfg.Resolver, f.cfg.Nodes)
			resolved = time.Now()
			if err != nil {
				f.log.Warn("cluster: follow: resolving nodes", "nodes", f.cfg.Nodes, "found", addrs, "err", err)
			}
		}
		if !f.read(ctx, addrs) {
			addrs = nil // nobody answered: ask DNS again next round
		}
		timer.Reset(f.cfg.Interval)
	}
}

// read takes the view from the first node that answers, trying the last
// source first; the first source is picked at random, so that many
// followers given the same list spread their reads.
func (f *Follower) read(ctx context.Context, addrs []string) bool {
	f.mu.Lock()
	prev := f.source
	f.mu.Unlock()
	order := slices.Clone(addrs)
	if i := slices.Index(order, prev); i >= 0 {
		order = append(order[i:], order[:i]...)
	} else if len(order) > 1 {
		i := rand.IntN(len(order))
		order = append(order[i:], order[:i]...)
	}
	var errs []error
	for _, addr := range order {
		if ctx.Err() != nil {
			return true
		}
		live, err := f.fetch(ctx, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.publish(addr, live)
		return true
	}
	err := errors.Join(errs...)
	if len(order) == 0 {
		err = fmt.Errorf("cluster: follow: %v resolve to no address", f.cfg.Nodes)
	}
	f.mu.Lock()
	first := f.err == nil
	f.err = err
	f.endRound()
	f.mu.Unlock()
	if first {
		f.log.Warn("cluster: follow: no node answered; keeping the last view", "nodes", order, "err", err)
	}
	return false
}

// publish records a good read and wakes the subscribers if the view
// changed.
func (f *Follower) publish(addr string, live []runtime.Member) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if addr != f.source || f.err != nil {
		f.log.Info("cluster: follow: reading the membership", "from", addr, "members", len(live))
	}
	f.joinedAt = f.keepJoined(addr, live, *f.live.Load())
	f.source, f.err = addr, nil
	if !sameMembers(*f.live.Load(), live) {
		f.live.Store(&live)
		for s := range f.subs {
			s.wake()
		}
	}
	f.endRound()
}

// endRound wakes Wait. Called with mu held.
func (f *Follower) endRound() {
	close(f.round)
	f.round = make(chan struct{})
}

// fetch reads one node's live members.
func (f *Follower) fetch(ctx context.Context, addr string) ([]runtime.Member, error) {
	scheme := "http"
	if f.cfg.TLS != nil {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/cluster/members", nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if f.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	}
	if h := f.failovers.header(f.cfg.Name); h != "" {
		req.Header.Set(FailoversHeader, h)
	}
	resp, err := f.http.Do(req)
	if err != nil {
		if ctx.Err() == nil && f.cfg.TLS == nil && speaksRPC(ctx, addr, f.cfg.Timeout) {
			return nil, fmt.Errorf("%w: %s speaks ffgen's RPC protocol, not HTTP: it is a node's RPC port; "+
				"give the follower the nodes' management addresses (ManagementConfig, MGMT_ADDR in the guide)", ErrNotManagement, addr)
		}
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMembersBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		json.Unmarshal(body, &e)
		return nil, fmt.Errorf("%s: %s: %s", addr, resp.Status, e.Error)
	}
	if len(body) > maxMembersBody {
		return nil, fmt.Errorf("%s: membership answer over %d bytes", addr, maxMembersBody)
	}
	if resp.Header.Get(JoinedHeader) == "false" {
		return nil, fmt.Errorf("%s: has not joined the cluster yet", addr)
	}
	var all []MemberStatus
	if err := json.Unmarshal(body, &all); err != nil {
		return nil, fmt.Errorf("%s: membership answer: %w", addr, err)
	}
	live := make([]runtime.Member, 0, len(all))
	for _, s := range all {
		if isLive(s.State) && s.Address != "" {
			live = append(live, runtime.Member{Name: s.Name, Group: s.Group, Addr: s.Address, Services: s.Services, CatchingUp: s.CatchingUp, Methods: s.Methods, JoinedAt: s.JoinedAt})
		}
	}
	slices.SortFunc(live, func(a, b runtime.Member) int { return strings.Compare(a.Name, b.Name) })
	return live, nil
}

// keepJoined gives each member of live that was in the previous view
// prev its JoinedAt there, unless addr, the node read before too, saw it
// join since; and returns the JoinedAt of each member as addr says. Each
// node saw the others join at its own moment: the JoinedAt of a node read
// for the first time would read as every member having joined again.
// Called with mu held.
func (f *Follower) keepJoined(addr string, live, prev []runtime.Member) map[string]time.Time {
	said := make(map[string]time.Time, len(live))
	for i := range live {
		m := &live[i]
		said[m.Name] = m.JoinedAt
		j := slices.IndexFunc(prev, func(p runtime.Member) bool { return p.Name == m.Name })
		if j < 0 {
			continue // new to the view
		}
		if before, ok := f.joinedAt[m.Name]; addr != f.source || !ok || before.Equal(m.JoinedAt) {
			m.JoinedAt = prev[j].JoinedAt
		}
	}
	return said
}

func sameMembers(a, b []runtime.Member) bool {
	return slices.EqualFunc(a, b, func(x, y runtime.Member) bool {
		return x.Name == y.Name && x.Group == y.Group && x.Addr == y.Addr && x.CatchingUp == y.CatchingUp && x.JoinedAt.Equal(y.JoinedAt) && slices.Equal(x.Services, y.Services) &&
			maps.EqualFunc(x.Methods, y.Methods, slices.Equal)
	})
}
