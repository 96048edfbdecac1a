package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/internal/conncap"
	"github.com/ffgen/ffgen/runtime/internal/pool"
	"github.com/ffgen/ffgen/runtime/internal/replica"
	"github.com/ffgen/ffgen/runtime/internal/tally"
	"github.com/ffgen/ffgen/runtime/transport"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Settings supply the heartbeat interval and attempt timeout for
	// attempts that carry none. Groups need not be set.
	Settings Settings
	// Codec decodes arguments and encodes results. Default codec.Binary.
	Codec codec.Codec
	// Metrics receives server events. Default NopMetrics.
	Metrics Metrics
	// Logger receives panics, forwards and dropped frames. Default slog.Default().
	Logger *slog.Logger
	// Membership resolves the node names handlers forward to (ForwardTo).
	Membership Membership
	// RememberResults bounds how many finished operations are remembered by
	// ID, so a repeated attempt is answered instead of executed again.
	// Default 16384.
	RememberResults int
	// RememberFor bounds how long they are remembered. Default one minute.
	RememberFor time.Duration
	// MaxAttemptTimeout caps the attempt timeout a client may ask for.
	// Default ten minutes.
	MaxAttemptTimeout time.Duration
	// Node is this node's name as the membership lists it. Services with
	// scatter methods are replicated among the members that serve them
	// (see ReplicationConfig), which needs it.
	Node string
	// Replication tunes the replicated log of scatter services.
	Replication ReplicationConfig
	// DataDir keeps the replicated services' raft state on disk, a
	// subdirectory per service, so that the node (or the whole cluster)
	// restarts with every acknowledged write: see docs/runtime.md,
	// "Durability". Empty keeps it in memory: a node restarts empty and
	// catches up from its peers, and a whole cluster restarted at once
	// starts empty.
	DataDir string
	// Interceptors wrap every handler run, the first outermost.
	Interceptors []ServerInterceptor
	// MaxPending bounds the operations queued or running on this node at
	// once (held, and replicated writes waiting for their commit,
	// included); MaxPendingPerEntity bounds those of one entity, so that
	// one hot entity cannot take the node. An attempt beyond either is
	// refused at arrival, before anything of it runs: its caller gets
	// ErrOverloaded, with OverloadRetryAfter as the hint, and neither
	// suspects the node nor fails over. Attempts that join an operation
	// already here are always taken. Zero or negative: no limit, the
	// default, since the count includes handlers that run long on
	// purpose (long polls, held operations), which a service that has
	// them must leave room for; SuggestedMaxPending and
	// SuggestedMaxPendingPerEntity suit a service of short handlers. See
	// docs/runtime.md, "Overload".
	MaxPending, MaxPendingPerEntity int
	// MaxQueued bounds the operations on this node that wait to start:
	// queued behind other operations on their entities, or replicated
	// writes and reads waiting for the log. Running handlers, however
	// long, and held operations are not counted, so the bound is on by
	// default: the waiting is what a saturated node adds to every call's
	// latency, and past it an attempt is refused at arrival, as past
	// MaxPending. Default DefaultMaxQueued; negative: no limit.
	MaxQueued int
	// QueueDelay bounds how long the operations this node takes on wait
	// to start, beyond what they wait on an idle node (for the
	// replicated log, say; a node whose operations wait longer than
	// QueueDelay unloaded lets a queue as long as that wait stand):
	// once half the operations that started in an interval (100 ms)
	// waited longer, a queue stands, and until an interval's median is
	// back under it an attempt is refused at arrival, as past
	// MaxQueued, when as many operations wait as the node starts in
	// that time.
	// MaxQueued bounds how many wait; QueueDelay how long, at whatever
	// rate the host lets the node work. Zero or negative: not watched,
	// the default, since on a host that starves the node of CPU its
	// waits grow with no queue of its making, and a few callers would
	// be refused; SuggestedQueueDelay suits a node whose clients back
	// off (ClientConfig.Limit). See docs/runtime.md, "Overload".
	QueueDelay time.Duration
	// OverloadRetryAfter is the retry-after hint of a refusal for
	// overload. Default the heartbeat interval.
	OverloadRetryAfter time.Duration
}

// Server runs registered services for the fast-failover protocol: it
// serializes operations per entity, heartbeats every attempt it holds, and
// remembers results by operation ID.
type Server struct {
	cfg ServerConfig // set by NewServer, read only after

	// mu guards the following, and the fields of execution, serverConn,
	// entityQueue and replicated that say so.
	mu         sync.Mutex
	services   map[string]*registered
	execs      map[[16]byte]*execution
	results    resultCache
	entities   map[string]*entityQueue
	freeQueues []*entityQueue
	conns      map[transport.Conn]*serverConn
	listeners  []transport.Listener
	replicas   map[string]*replicated // by service, for services with scatter methods
	closed     bool                   // no new operations
	halted     bool                   // queued operations end without running
	waiting    int                    // executions in execs that wait to start (track)
	delay      delayWatch             // how long they waited (server_queuedelay.go)

	// peerMu guards the connections to the other servers, for
	// replication: raft sends on them without the server's lock.
	peerMu  sync.Mutex
	peers   *pool.Pool                // connections this server dialed
	dialing map[string]bool           // peer addresses being dialed
	peerIn  map[string]transport.Conn // by node: the latest connection a peer opened to us

	// Safe for concurrent use on their own.
	running sync.WaitGroup // the handlers started and not returned
	workers workers        // the goroutines that run handlers
	// progressed counts the progress reports of all handlers: a
	// connection's tick walks its calls again once it moved.
	progressed atomic.Uint64
	// tickLate is how late the connections' heartbeat ticks have run
	// lately, which every heartbeat tells its client (Heartbeat.Late).
	tickLate lateness
	// members is the membership, read by replication without the
	// server's lock (UseMembership may set it late).
	members atomic.Pointer[Membership]
	// served counts the attempts of methods the server does not serve.
	served servedCounts
	// replicaGroups holds the raft groups of replicas, which the readers
	// flush where their batches end without taking mu. Stored under mu.
	replicaGroups atomic.Pointer[[]*replica.Group]
}

var _ transport.ConnHandler = (*serverHandler)(nil)
var _ InFlighter = (*Server)(nil)

type registered struct {
	desc    *ServiceDesc
	impl    any
	methods map[string]*servedMethod
}

// servedMethod is a registered method, how long its handler runs, and
// what the server counted of it (see Served).
type servedMethod struct {
	desc   *MethodDesc
	pace   handlerPace
	served tally.Served
	// advertised is what the node advertises of it in the membership.
	advertised ServedMethod
}

// NewServer returns a server with no services.
func NewServer(cfg ServerConfig) *Server {
	d := DefaultSettings()
	if cfg.Settings.HeartbeatInterval <= 0 {
		cfg.Settings.HeartbeatInterval = d.HeartbeatInterval
	}
	if cfg.Settings.AttemptTimeout <= 0 {
		cfg.Settings.AttemptTimeout = d.AttemptTimeout
	}
	withDefaults(&cfg.Codec, &cfg.Metrics, &cfg.Logger)
	if cfg.RememberResults <= 0 {
		cfg.RememberResults = 16384
	}
	if cfg.RememberFor <= 0 {
		cfg.RememberFor = time.Minute
	}
	if cfg.MaxAttemptTimeout <= 0 {
		cfg.MaxAttemptTimeout = 10 * time.Minute
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.OverloadRetryAfter <= 0 {
		cfg.OverloadRetryAfter = cfg.Settings.HeartbeatInterval
	}
	s := &Server{
		cfg:      cfg,
		services: make(map[string]*registered),
		execs:    make(map[[16]byte]*execution),
		results:  resultCache{max: cfg.RememberResults, ttl: cfg.RememberFor, m: make(map[[16]byte]cachedResult)},
		entities: make(map[string]*entityQueue),
		conns:    make(map[transport.Conn]*serverConn),
		replicas: make(map[string]*replicated),
		dialing:  make(map[string]bool),
		peerIn:   make(map[string]transport.Conn),
		delay:    delayWatch{target: cfg.QueueDelay},
	}
	s.workers.init()
	if cfg.Membership != nil {
		s.members.Store(&cfg.Membership)
	}
	return s
}

// Register serves svc with impl, which generated code guarantees implements
// the service's interface. A service can be registered once.
func (s *Server) Register(svc *ServiceDesc, impl any) error {
	if svc == nil || svc.Name == "" {
		return errors.New("ffgen: Register: service descriptor has no name")
	}
	if impl == nil {
		return fmt.Errorf("ffgen: Register %s: nil implementation", svc.Name)
	}
	if err := validateOverrides(svc); err != nil {
		return fmt.Errorf("ffgen: Register %s: %w", svc.Name, err)
	}
	r := &registered{desc: svc, impl: impl, methods: make(map[string]*servedMethod, len(svc.Methods))}
	for _, m := range svc.Methods {
		if m == nil {
			return fmt.Errorf("ffgen: Register %s: nil method", svc.Name)
		}
		// Clients route and servers look up by MethodDesc.Service: a
		// method naming another service would be served under one name
		// and called under the other.
		if m.Service != svc.Name {
			return fmt.Errorf("ffgen: Register %s: method %s says it belongs to service %q", svc.Name, m.Name, m.Service)
		}
		if m.Handle == nil || m.NewArgs == nil {
			return fmt.Errorf("ffgen: Register %s: method %s has no handler", svc.Name, m.Name)
		}
		if _, dup := r.methods[m.Name]; dup {
			return fmt.Errorf("ffgen: Register %s: method %s is declared twice", svc.Name, m.Name)
		}
		r.methods[m.Name] = &servedMethod{desc: m, advertised: servedOf(m)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.services[svc.Name]; dup {
		return fmt.Errorf("ffgen: Register: service %s is already registered", svc.Name)
	}
	for _, m := range svc.Methods {
		if m.Mode == ModeScatter {
			rep, err := s.newReplicated(r)
			if err != nil {
				return fmt.Errorf("ffgen: Register %s: %w", svc.Name, err)
			}
			s.replicas[svc.Name] = rep
			var groups []*replica.Group
			if old := s.replicaGroups.Load(); old != nil {
				groups = slices.Clone(*old)
			}
			groups = append(groups, rep.g)
			s.replicaGroups.Store(&groups)
			break
		}
	}
	s.services[svc.Name] = r
	return nil
}

// Services lists the registered service names, for membership metadata.
func (s *Server) Services() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.services))
	for name := range s.services {
		out = append(out, name)
	}
	return out
}

// Methods returns what the node advertises of the methods it serves, by
// service, one ServedMethod per method, sorted, for its membership metadata
// (cluster.Config.Methods).
func (s *Server) Methods() map[string][]ServedMethod {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]ServedMethod, len(s.services))
	for name, reg := range s.services {
		out[name] = servedMethods(reg.desc)
	}
	return out
}

// Serve listens on addr through t and serves every accepted connection.
func (s *Server) Serve(t transport.Transport, addr string) (transport.Listener, error) {
	l, err := t.Listen(addr, (*serverHandler)(s))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		l.Close()
		return nil, errors.New("ffgen: server is shut down")
	}
	s.listeners = append(s.listeners, l)
	s.peerMu.Lock()
	if s.peers == nil {
		s.peers = pool.New(t, (*peerHandler)(s), transport.PoolConfig{BackoffMax: peerBackoffMax}, pool.CloseUnackedAfter(peerUnackedTimeout))
	}
	s.peerMu.Unlock()
	return l, nil
}

// Shutdown stops accepting connections, waits for running handlers until ctx
// ends, then cancels the rest and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.leaveReplicas(ctx)
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	defer s.stopReplicas()
	done := make(chan struct{})
	go func() {
		s.running.Wait()
		close(done)
	}()
	defer s.workers.close()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.cancelAll()
		<-done
		return ctx.Err()
	}
}

// Close stops the server at once, as a crash would look to clients: it
// closes listeners and connections and cancels running handlers without
// waiting for them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.halted = true
	ls := s.listeners
	s.listeners = nil
	conns := make([]transport.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.cancelAll()
	s.stopReplicas()
	s.workers.close()
	return nil
}

// leaveReplicas takes this node out of every replicated service's group
// before it stops, as a graceful stop does: reads it can no longer vouch
// for are passed on to the leader or refused at once, leadership is
// handed over, and, unless its state is on disk (DataDir), the node is
// removed from the voters (it restarts empty, as a new member). It waits
// for that at most until ctx ends, or leaveTimeout.
func (s *Server) leaveReplicas(ctx context.Context) {
	s.mu.Lock()
	reps := make([]*replicated, 0, len(s.replicas))
	for _, r := range s.replicas {
		reps = append(reps, r)
	}
	s.mu.Unlock()
	if len(reps) == 0 || s.cfg.Node == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaveTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, r := range reps {
		r.g.Drain()
		wg.Go(func() {
			if s.cfg.DataDir != "" {
				// It comes back with its state: it stays a member.
				if err := r.g.StepDown(ctx); err != nil {
					s.cfg.Logger.Warn("ffgen: could not hand leadership over before stopping", "service", r.name, "err", err)
				}
				return
			}
			if err := r.g.Leave(ctx); err != nil {
				s.cfg.Logger.Warn("ffgen: could not leave the replicated group before stopping; an operator may remove this node",
					"service", r.name, "err", err)
			}
		})
	}
	wg.Wait()
}

// leaveTimeout bounds how long a graceful stop waits to leave a group.
const leaveTimeout = 5 * time.Second

// stopReplicas ends replication: the raft groups and the peer connections.
func (s *Server) stopReplicas() {
	s.mu.Lock()
	reps := make([]*replicated, 0, len(s.replicas))
	for _, r := range s.replicas {
		reps = append(reps, r)
		if r.parkTimer != nil {
			r.parkTimer.Stop()
		}
	}
	s.mu.Unlock()
	for _, r := range reps {
		r.g.Stop()
	}
	s.peerMu.Lock()
	p := s.peers
	s.peerMu.Unlock()
	if p != nil {
		p.Close()
	}
}

// cancelAll cancels the context of every running handler and makes queued
// operations end without running.
func (s *Server) cancelAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.halted = true
	for _, e := range s.execs {
		if e.fire(evHalt) == stateHalted && e.ctx != nil {
			e.ctx.cancel()
		}
	}
}

// handleFrame receives a frame of a client's connection.
func (s *Server) handleFrame(c transport.Conn, f frame.Frame) {
	switch f := f.(type) {
	case *frame.Attempt:
		s.arrive(c, f)
	case *frame.Cancel:
		s.cancelCall(c, f.Call)
	case *frame.Replica:
		s.replicaFrame(c, f, true)
	default:
		// Heartbeats, results and redirects flow server to client only.
		s.cfg.Logger.Debug("ffgen: server ignores frame", "type", f.Type(), "peer", c.Peer().Node)
	}
}

// handleClose forgets a client's connection. Operations keep running: the
// client has failed over, and a half-run handler is worse than a finished
// one whose result nobody reads.
func (s *Server) handleClose(c transport.Conn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peerMu.Lock()
	if n := c.Peer().Node; s.peerIn[n] == c {
		delete(s.peerIn, n)
	}
	s.peerMu.Unlock()
	sc := s.conns[c]
	if sc == nil {
		return
	}
	delete(s.conns, c)
	for call, e := range sc.calls {
		e.removeWaiter(sc, call)
	}
	sc.calls = nil
	sc.stopHeartbeats()
}

func (s *Server) arrive(c transport.Conn, a *frame.Attempt) {
	// One time for the attempt's arrival and both looks in the result
	// cache: they are microseconds apart, and the cache keeps results for
	// minutes. It is when the frame came, if the connection knows.
	now := conncap.ReceivedAt(c)
	s.mu.Lock()
	sc := s.connLocked(c)
	if r, seen := s.seenLocked(sc, a, now); seen {
		s.mu.Unlock()
		if r != nil {
			s.send(c, r)
		}
		return
	}
	reg := s.services[a.Service]
	var sm *servedMethod
	if reg != nil {
		sm = reg.methods[a.Method]
	}
	if closed := s.closed; sm == nil || closed {
		s.mu.Unlock()
		r := &frame.Result{Call: a.Call, Status: frame.StatusFailover, Code: codeUnknownMethod,
			Message: fmt.Sprintf("node does not serve %s.%s", a.Service, a.Method)}
		if closed {
			r.Code, r.Message = codeCatchingUp, "node is shutting down"
		}
		s.refusedAttempt(sm, a.Service, a.Method, c, r)
		return
	}
	s.mu.Unlock()
	m := sm.desc

	// Decoded outside the lock, which every attempt and every result of
	// every connection needs.
	args := m.NewArgs()
	if err := s.cfg.Codec.Unmarshal(a.Payload, args); err != nil {
		s.send(c, &frame.Result{Call: a.Call, Status: frame.StatusFail, Code: codeBadArgs,
			Message: fmt.Sprintf("decode arguments of %s.%s: %v", a.Service, a.Method, err)})
		return
	}
	md, err := incomingMD(a.Metadata)
	if err != nil {
		s.send(c, &frame.Result{Call: a.Call, Status: frame.StatusFail, Code: codeBadArgs,
			Message: fmt.Sprintf("metadata of %s.%s: %v", a.Service, a.Method, err)})
		return
	}
	// Both come from the network: bounded, so one frame cannot make the
	// server heartbeat in a busy loop or hold an entity for a day.
	timeout := a.Timeout
	if timeout <= 0 || timeout > s.cfg.MaxAttemptTimeout {
		timeout = min(s.cfg.Settings.AttemptTimeout, s.cfg.MaxAttemptTimeout)
	}
	e := &execution{
		s:       s,
		method:  m,
		sm:      sm,
		impl:    reg.impl,
		args:    args,
		timeout: timeout,
		arrived: now,
		hold:    a.Flags&frame.FlagHold != 0,
		scatter: a.Flags&frame.FlagScatter != 0,
	}
	e.remember.Store(a.Flags&frame.FlagNoRepeat == 0)
	e.info = AttemptInfo{
		OpID:     a.OpID,
		Number:   int(a.Number),
		Entities: e.keepEntities(a.Entities),
		Caller:   c.Peer().Node,
		exec:     e,
		md:       md,
	}
	e.entities = uniqueEntities(e.info.Entities)
	if len(a.Progress) > 0 {
		e.info.Progress = append([]byte(nil), a.Progress...)
	}
	for _, p := range a.History {
		e.info.History = append(e.info.History, PriorAttempt{Node: p.Node, Group: p.Group, Reason: Reason(p.Reason)})
	}

	s.mu.Lock()
	// Another attempt of the operation may have come in meanwhile, on
	// another connection, and started it or even finished it.
	if r, seen := s.seenLocked(sc, a, now); seen {
		s.mu.Unlock()
		if r != nil {
			s.send(c, r)
		}
		return
	}
	if s.closed {
		s.mu.Unlock()
		s.refusedAttempt(sm, a.Service, a.Method, c, &frame.Result{Call: a.Call, Status: frame.StatusFailover, Code: codeCatchingUp, Message: "node is shutting down"})
		return
	}
	if r := s.admitLocked(e); r != nil && !s.recordedLocked(a) {
		s.mu.Unlock()
		r.Call = a.Call
		s.refusedAttempt(sm, a.Service, a.Method, c, r)
		return
	}
	if rep := s.replicas[a.Service]; rep != nil {
		if e.scatter {
			// A replicated write: proposed, redirected to the leader,
			// held for an election, or answered (refused, or recorded).
			e.payload = append([]byte(nil), a.Payload...)
			res, rd := rep.write(e, a)
			if res == nil && rd == nil {
				s.track(e)
				e.addWaiter(sc, a)
			}
			s.mu.Unlock()
			switch {
			case rd != nil:
				rd.Call = a.Call
				s.send(c, rd)
			case res != nil:
				res.Call = a.Call
				s.refusedAttempt(sm, a.Service, a.Method, c, res)
			}
			return
		}
		refusal, rd, wait := rep.read(e, a)
		switch {
		case rd != nil:
			s.mu.Unlock()
			rd.Call = a.Call
			s.send(c, rd)
			return
		case refusal != nil:
			// A read of a replica that does not serve could contradict
			// the others.
			s.mu.Unlock()
			refusal.Call = a.Call
			s.refusedAttempt(sm, a.Service, a.Method, c, refusal)
			return
		}
		if wait {
			s.track(e)
			e.addWaiter(sc, a)
			s.mu.Unlock()
			go rep.awaitRead(e)
			return
		}
	}
	s.track(e)
	e.addWaiter(sc, a)
	started := s.enqueue(e)
	inline := started && sc.inline != nil && sm.pace.quick()
	if started && !inline {
		s.start(e)
	}
	s.mu.Unlock()
	if inline {
		s.runInline(sc, e)
	}
}

// recordedLocked reports whether a is an attempt of a replicated write
// that the log has recorded here: it is answered from the record whatever
// the load, since a refusal would tell its caller that a write that ran
// never did. Called with s.mu held.
func (s *Server) recordedLocked(a *frame.Attempt) bool {
	rep := s.replicas[a.Service]
	if rep == nil || a.Flags&frame.FlagScatter == 0 {
		return false
	}
	_, ok := rep.g.Recorded(a.OpID)
	return ok
}

// track puts e, which has not started, among the server's executions,
// and counts it among those waiting to start until it leaves that state
// (execution.fire). Called with s.mu held.
func (s *Server) track(e *execution) {
	s.execs[e.info.OpID] = e
	if !e.waitsIn && e.state.waiting() {
		e.waitsIn = true
		s.waiting++
	}
}

// seenLocked takes attempt a, which arrived at now, on if its operation is
// known here already. Queued or running, the operation gets a as another
// waiter (r is nil). Completed, its remembered result is returned in r,
// addressed to a, for the caller to send once it has unlocked s.mu. Called
// with s.mu held.
func (s *Server) seenLocked(sc *serverConn, a *frame.Attempt, now time.Time) (r *frame.Result, seen bool) {
	if e := s.execs[a.OpID]; e != nil {
		// A repeat of a queued operation, or of a running one (one being
		// stopped for want of waiters runs again).
		e.fire(evJoin)
		e.remember.Store(true) // asked for twice: it may be asked for again
		e.addWaiter(sc, a)
		return nil, true
	}
	cached, ok := s.results.get(a.OpID, now)
	if !ok {
		return nil, false
	}
	// The copy escapes here, on the rare hit, not on every attempt.
	res := cached
	res.Call = a.Call
	return &res, true
}

// answerUnrun ends e, which never ran, with res for every waiter. Called with
// s.mu held; the sends are queued, never blocking.
func (s *Server) answerUnrun(e *execution, res *frame.Result) {
	s.endUnrun(e, func(call uint64) frame.Frame {
		r := *res
		r.Call = call
		return &r
	})
}

// redirectUnrun sends e's waiters to another node, as a handler's ForwardTo
// does. Called with s.mu held.
func (s *Server) redirectUnrun(e *execution, rd *frame.Redirect) {
	s.endUnrun(e, func(call uint64) frame.Frame {
		r := *rd
		r.Call = call
		return &r
	})
}

// endUnrun ends e, which never ran, with the frame f makes for each waiter.
func (s *Server) endUnrun(e *execution, f func(call uint64) frame.Frame) {
	for _, w := range e.waiters {
		w.conn.forget(w.call)
		s.send(w.conn.conn, f(w.call))
	}
	e.waiters = nil
	if s.execs[e.info.OpID] == e {
		delete(s.execs, e.info.OpID)
	}
	e.fire(evAnswer)
}

// refuse answers e Failover with a code and message.
func (s *Server) refuse(e *execution, code, msg string) {
	s.countRefusal(e.sm, e.method.Service, e.method.Name, code)
	s.answerUnrun(e, &frame.Result{Status: frame.StatusFailover, Code: code, Message: msg})
}

// refusedAttempt sends r, an answer given without running anything, and
// counts it when it is a refusal. sm is the method, nil if not served.
func (s *Server) refusedAttempt(sm *servedMethod, service, method string, c transport.Conn, r *frame.Result) {
	if r.Status == frame.StatusFailover {
		s.countRefusal(sm, service, method, r.Code)
	}
	s.send(c, r)
}

// countRefusal counts an attempt refused with code (refusedCode: nothing
// ran), beside the handler runs, so that a node that refuses its calls
// shows it. sm is the method, nil if the server does not serve it.
func (s *Server) countRefusal(sm *servedMethod, service, method, code string) {
	if !refusedCode(code) {
		return
	}
	if sm != nil {
		sm.served.Handled("refused", code, 0)
	} else {
		s.served.of(service, method).Handled("refused", code, 0)
	}
	s.cfg.Metrics.Handled(service, method, "refused", code, 0)
}

// handled counts a handler run of sm that ended with status and code.
func (s *Server) handled(sm *servedMethod, status, code string, ran time.Duration) {
	sm.served.Handled(status, code, ran)
	s.cfg.Metrics.Handled(sm.desc.Service, sm.desc.Name, status, code, ran)
}

// minHeartbeatInterval is the shortest heartbeat interval a client may ask
// for: a shorter one would have the server spend its time heartbeating.
const minHeartbeatInterval = time.Millisecond

func (s *Server) clampInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return s.cfg.Settings.HeartbeatInterval
	}
	return max(d, minHeartbeatInterval)
}

func (s *Server) connLocked(c transport.Conn) *serverConn {
	sc := s.conns[c]
	if sc == nil {
		sc = &serverConn{s: s, conn: c, calls: make(map[uint64]*execution)}
		sc.inline, _ = c.(conncap.InlineConn)
		sc.tellsLate = c.Peer().Revision >= 2
		s.conns[c] = sc
	}
	return sc
}

func (s *Server) cancelCall(c transport.Conn, call uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.conns[c]
	if sc == nil {
		return
	}
	e := sc.calls[call]
	if e == nil {
		return
	}
	e.removeWaiter(sc, call)
	if len(e.waiters) == 0 && !e.scatter && e.state != stateArrived {
		// Nobody wants the outcome any more. A scatter copy runs on so that
		// every node applies the same writes.
		switch e.fire(evCancel) {
		case stateAbandoned:
			if e.ctx != nil {
				e.ctx.cancel()
			}
		case stateExpired:
			e.end(nil, nil) // it never ran: it leaves its queues now
		}
	}
}

func (s *Server) send(c transport.Conn, f frame.Frame) {
	err := c.Send(f)
	if r, ok := f.(*frame.Result); ok && errors.Is(err, transport.ErrFrameTooLarge) {
		// The caller would wait for a result that cannot come: tell it
		// why instead, as a Fail, since every node would answer the same.
		err = c.Send(&frame.Result{Call: r.Call, Status: frame.StatusFail, Code: codeTooLarge,
			Message: fmt.Sprintf("the result does not fit in a frame: %v", err)})
	}
	if err != nil {
		s.cfg.Logger.Warn("ffgen: server could not send", "type", f.Type(), "peer", c.Peer().Node, "err", err)
	}
}

// InFlight lists the operations queued, held or running on this server.
func (s *Server) InFlight() []OpInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]OpInfo, 0, len(s.execs))
	for id, e := range s.execs {
		out = append(out, OpInfo{
			Side:     "server",
			OpID:     fmt.Sprintf("%x", id),
			Service:  e.method.Service,
			Method:   e.method.Name,
			Entities: e.entities,
			Attempt:  e.info.Number,
			Node:     e.info.Caller,
			Started:  e.arrived,
			State:    e.state.reported(),
		})
	}
	return out
}

// keepEntities copies an attempt's entities, which its decoder reuses:
// into e's own array when they fit, except for a replicated write, whose
// log entry keeps them long after e.
func (e *execution) keepEntities(ids []string) []string {
	if len(ids) <= len(e.entBuf) && !e.scatter {
		return append(e.entBuf[:0:len(e.entBuf)], ids...)
	}
	return append([]string(nil), ids...)
}

func uniqueEntities(ids []string) []string {
	if len(ids) < 2 {
		return ids
	}
	out := ids[:0:0]
	for _, id := range ids {
		dup := false
		for _, o := range out {
			if o == id {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, id)
		}
	}
	return out
}
