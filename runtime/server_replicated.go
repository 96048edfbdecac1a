package runtime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/internal/replica"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The server's side of a replicated service's raft group: how a write is
// taken (proposed on the leader, redirected to it, or held while this node
// stands for election), how a committed write is applied through the
// service's handler, and how reads are guarded.

// Replication answers, in the Code of a Failover result. Those that say
// nothing ran make the client report the attempt as refused.
const (
	codeCatchingUp = "ffgen.catching-up" // the node does not serve the service now; nothing ran
	codeNotLeader  = "ffgen.not-leader"  // the write was not taken; nothing ran
	codeNoRead     = "ffgen.read-unconfirmed"
	// codeLeaderLost: leadership moved while the write waited for its
	// commit. It may still commit: a retry with the same operation ID gets
	// its result.
	codeLeaderLost = "ffgen.leader-lost"
	// codeVotersCannotApply: a voter does not serve the write's method
	// with the same arguments (a node of another version during a
	// rollout); the write was not proposed. A Fail answer: every node
	// would send the client to the same leader.
	codeVotersCannotApply = "ffgen.voters-cannot-apply"
)

// refusedCode reports whether a Failover answer with code says that the
// node ran nothing of the attempt.
func refusedCode(code string) bool {
	switch code {
	case codeCatchingUp, codeNotLeader, codeNoRead, codeUnknownMethod, codeVotersCannotApply, codeNotStarted, codeOverloaded:
		return true
	}
	return false
}

// applyTimeout is a replicated write's attempt timeout when it is applied:
// none. Every replica must apply every write with the same result, which a
// timer that fires on one node and not on another would break.
const applyTimeout = time.Duration(1<<63 - 1)

// replicated is one replicated service on this server.
type replicated struct {
	// Set by newReplicated, read only after.
	s        *Server
	name     string
	reg      *registered
	transfer StateTransfer
	cfg      ReplicationConfig
	g        *replica.Group // safe for concurrent use
	// parkFor is how long a write or a read waits for an election (at
	// most its attempt's timeout): the old leader's lease, and a split
	// vote or a candidate whose log is behind, which another candidate
	// must follow after a randomized election timeout.
	parkFor time.Duration
	// args are what each write method's arguments can carry, by method
	// (unappliable), for those whose descriptor lists them.
	args map[string]*argFields

	// lastSeen holds each peer as the membership last listed it live, by
	// name (peer).
	lastSeen sync.Map

	// s.mu guards the following.
	pending   map[[16]byte]*execution // proposed here, not applied yet
	parked    []parkedWrite           // waiting for a leader
	parkTimer *time.Timer
	// applying is the write being applied: the apply goroutine applies
	// one at a time (Apply), so one serves them all.
	applying applying
}

type parkedWrite struct {
	e      *execution
	until  time.Time
	failed []string // the nodes the client failed at: not where to send it
	// proposed: a deposed leader proposed it, so it may commit yet; if no
	// leader takes it, its caller is told it may have run.
	proposed bool
}

// newReplicated starts the group of a service with a scatter method.
// Called with s.mu held.
func (s *Server) newReplicated(reg *registered) (*replicated, error) {
	cfg := s.cfg.Replication.withDefaults(s.cfg.Settings)
	if s.cfg.Node != "" && len(cfg.Voters) == 0 {
		return nil, errNoVoters
	}
	r := &replicated{
		s:       s,
		name:    reg.desc.Name,
		reg:     reg,
		cfg:     cfg,
		parkFor: 5 * cfg.ElectionTimeout,
		pending: make(map[[16]byte]*execution),
	}
	for _, m := range reg.desc.Methods {
		if m.Mode != ModeScatter || len(m.Schema.Fields) == 0 {
			continue
		}
		a, err := parseArgFields(m.Name, m.Schema.Fields)
		if err != nil {
			return nil, err
		}
		if r.args == nil {
			r.args = make(map[string]*argFields)
		}
		r.args[m.Name] = a
	}
	r.transfer, _ = reg.impl.(StateTransfer)
	snapEvery := uint64(cfg.SnapshotEvery)
	if r.transfer == nil {
		snapEvery = 0
		where := "in memory"
		if s.cfg.DataDir != "" {
			where = "on disk"
		}
		s.cfg.Logger.Info("ffgen: replicated service without StateTransfer: every node keeps its whole log "+where+", so that a joining node can replay it",
			"service", r.name)
	}
	var dir string
	if s.cfg.DataDir != "" {
		dir = filepath.Join(s.cfg.DataDir, r.name)
		s.cfg.Logger.Info("ffgen: replicated service stored on disk", "service", r.name, "dir", dir, "fsync", !cfg.UnsafeNoFsync)
	} else {
		s.cfg.Logger.Info("ffgen: replicated service kept in memory only (no DataDir): a node restarts empty, and a whole cluster restarted at once starts empty", "service", r.name)
	}
	tick := max(cfg.ElectionTimeout/raftTicks, time.Millisecond)
	var err error
	r.g, err = replica.New(replica.Config{
		Service:         r.name,
		Node:            s.cfg.Node,
		Voters:          cfg.Voters,
		TieBreaker:      cfg.TieBreaker,
		Tick:            tick,
		ElectionTicks:   raftTicks,
		HeartbeatTicks:  raftHeartbeatTicks,
		SnapshotEvery:   snapEvery,
		KeepEntries:     snapEvery / 2,
		RememberWrites:  cfg.RememberWrites,
		MaxMessageBytes: cfg.MaxSnapshotBytes,
		Dir:             dir,
		Cluster:         cfg.Cluster,
		NoSync:          cfg.UnsafeNoFsync,
		Logger:          s.cfg.Logger,
		Host:            (*replicaHost)(r),
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// write takes a client's scatter attempt: e is its new execution, not
// scheduled. It returns the answer when the attempt is not taken; when it
// is (both nil), the caller registers e, which waits for its write to be
// applied here. Called with s.mu held.
func (r *replicated) write(e *execution, a *frame.Attempt) (*frame.Result, *frame.Redirect) {
	if res, ok := r.g.Recorded(a.OpID); ok {
		return &res, nil
	}
	if r.g.Stopped() || r.s.closed {
		return r.notServing(), nil
	}
	if _, leading := r.g.Leader(); leading {
		if res := r.unappliable(e); res != nil {
			return res, nil
		}
		r.propose(e)
		return nil, nil
	}
	if m, ok := r.liveLeader(a); ok {
		if !r.routable(m) {
			// A tie-breaker won an election: it hands leadership
			// over at once; the write waits for that.
			r.park(e, a)
			return nil, nil
		}
		return nil, &frame.Redirect{Node: m.Name, Addr: m.Addr}
	}
	if !r.g.CanLead() {
		return &frame.Result{Status: frame.StatusFailover, Code: codeNotLeader,
			Message: "no leader is known here, and this node cannot lead (a learner or a tie-breaker)"}, nil
	}
	// The client failed over from the leader, the leader has gone silent,
	// or no leader is known: stand for election now rather than after an
	// election timeout.
	r.g.Campaign()
	r.park(e, a)
	return nil, nil
}

// liveLeader returns the leader when another node leads that a's client
// has not failed at and this node has heard from lately: where an
// attempt this node does not take may go instead. The leader is found as
// raft finds its peers (peer): a leader that restarted and won an
// election before gossip told this node it was back is where raft's
// messages come from, though the membership here does not list it yet.
func (r *replicated) liveLeader(a *frame.Attempt) (Member, bool) {
	leader, leading := r.g.Leader()
	if leading || leader == "" || failedAt(a, leader) || r.g.LeaderSilent() {
		return Member{}, false
	}
	return r.peer(leader)
}

func (r *replicated) notServing() *frame.Result {
	why := "not serving"
	if err := r.g.Ready(); err != nil {
		why = err.Error()
	}
	if r.s.closed {
		why = "the node is shutting down"
	}
	return &frame.Result{Status: frame.StatusFailover, Code: codeCatchingUp, Message: "replica " + why}
}

// failedAt reports whether an earlier attempt of a ended at node: the
// client failed over from it.
func failedAt(a *frame.Attempt, node string) bool {
	for _, p := range a.History {
		if p.Node == node {
			return true
		}
	}
	return false
}

// unappliable returns the refusal of e's write when a voter, as the
// membership advertises it, cannot apply it as this leader does: an older
// build lacking the method, or one that reads its arguments otherwise and
// does not know a field the write carries (or knows it with a kind that
// cannot hold its value), would stop at the entry or apply it
// differently. A voter that advertises the leader's own arguments
// (the same ServedMethod) can apply every write of the method, and its
// check ends there; only a voter of another version costs a walk over
// the write's arguments. The write is then not proposed, and nothing ran
// anywhere. A voter that is not a live member, or advertises nothing for
// the service (a release before schema identity), is not checked: it
// finds out when it applies the entry, and stops there if it cannot (see
// apply.go); one that advertises its methods but not their argument
// fields (the release before this check) must advertise the same
// arguments. Called with s.mu held.
func (r *replicated) unappliable(e *execution) *frame.Result {
	sm := r.reg.methods[e.method.Name]
	ms := r.s.membership()
	if sm == nil || ms == nil {
		return nil
	}
	members := ms.Members()
	var why string
	r.g.EachVoter(func(name string) bool {
		if name == r.s.cfg.Node {
			return true
		}
		for i := range members {
			mb := &members[i]
			if mb.Name != name {
				continue
			}
			same, known := mb.appliesAs(r.name, sm.advertised)
			switch {
			case !known || same:
			case !mb.servesMethod(r.name, sm.advertised):
				why = fmt.Sprintf("voter %s does not serve %s.%s (a version of the service without it)", name, r.name, e.method.Name)
			default:
				why = r.otherArguments(e, mb)
			}
			break
		}
		return why == ""
	})
	if why == "" {
		return nil
	}
	r.s.countRefusal(sm, r.name, e.method.Name, codeVotersCannotApply)
	return &frame.Result{Status: frame.StatusFail, Code: codeVotersCannotApply,
		Message: why + ": the write was not proposed; it can be once every voter runs a version that applies it"}
}

// otherArguments returns why voter mb, which serves e's method with other
// arguments than this leader, cannot apply e's write; "" if it can: it
// knows every field the write's arguments carry, each with a kind that
// holds the value sent.
func (r *replicated) otherArguments(e *execution, mb *Member) string {
	a := r.args[e.method.Name]
	ws := mb.argFieldsOf(r.name)
	// The walk reads protobuf's wire format: the generated codec's, not
	// another one a server may be configured with.
	if a == nil || len(ws) == 0 || r.s.cfg.Codec.Name() != "binary" {
		return fmt.Sprintf("voter %s serves %s.%s with other arguments (another version of the service)", mb.Name, r.name, e.method.Name)
	}
	u, found := a.unknownTo(e.payload, ws)
	if !found {
		return ""
	}
	where := r.name + "." + e.method.Name
	switch {
	case u.malformed:
		return fmt.Sprintf("the arguments of this write to %s are not in protobuf's wire format, so that this node cannot tell whether voter %s, which serves the method with other arguments, can apply it", where, mb.Name)
	case u.unknownHere:
		return fmt.Sprintf("this node, the leader, does not know %s, which the write to %s carries (a client of a newer version)", u.String(), where)
	case u.value != "":
		return fmt.Sprintf("voter %s knows %s, which the write to %s carries, with a kind that cannot hold its value %s (it runs another version of the service)", mb.Name, u.String(), where, u.value)
	}
	return fmt.Sprintf("voter %s does not know %s, which the write to %s carries (it runs another version of the service)", mb.Name, u.String(), where)
}

// propose hands e's write to raft. Called with s.mu held.
func (r *replicated) propose(e *execution) {
	r.pending[e.info.OpID] = e
	r.g.Propose(&replica.Command{
		OpID:     e.info.OpID,
		Method:   e.method.Name,
		Entities: e.entities,
		Payload:  e.payload,
		MD:       pairsOf(e.info.md),
	})
}

// park holds e until a leader is known, parkFor at most (or its attempt's
// timeout, if shorter); the client sees its heartbeats meanwhile. a, the
// attempt that brought e, names the nodes the client failed at; nil for a
// write moving on from a deposed leader. Called with s.mu held.
func (r *replicated) park(e *execution, a *frame.Attempt) {
	p := parkedWrite{e: e, until: time.Now().Add(min(r.parkFor, e.timeout))}
	if a != nil {
		for _, h := range a.History {
			p.failed = append(p.failed, h.Node)
		}
	}
	r.parked = append(r.parked, p)
	if r.parkTimer == nil {
		r.parkTimer = time.AfterFunc(time.Until(p.until), r.parkExpired)
	}
}

// parkExpired refuses the writes that waited too long for a leader.
func (r *replicated) parkExpired() {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	r.parkTimer = nil
	now := time.Now()
	kept := r.parked[:0]
	for _, p := range r.parked {
		if now.Before(p.until) {
			kept = append(kept, p)
			continue
		}
		if p.e.state != stateArrived {
			continue
		}
		why := fmt.Sprintf("no leader was elected within %s", min(r.parkFor, p.e.timeout))
		if p.proposed {
			s.refuse(p.e, codeLeaderLost, "leadership moved while the write waited for its commit, and "+why+"; it may still commit")
		} else {
			s.refuse(p.e, codeNotLeader, why)
		}
	}
	clear(r.parked[len(kept):])
	r.parked = kept
	if len(kept) > 0 {
		next := kept[0].until
		for _, p := range kept {
			if p.until.Before(next) {
				next = p.until
			}
		}
		r.parkTimer = time.AfterFunc(time.Until(next), r.parkExpired)
	}
}

// unparked resolves the held writes once a leader is known. A leader that
// restarted and won before gossip here listed it again is found as raft
// finds it (peer): found as a live member only, it refused the writes
// held here ("the leader a2 is not a live member here", in a run of make
// faults' rolling-restart-all, 60 ms after a2 restarted). Called with
// s.mu held.
func (r *replicated) unpark(leader string, leading bool) {
	if len(r.parked) == 0 || (leader == "" && !leading) {
		return
	}
	parked := r.parked
	r.parked = nil
	m, known := r.peer(leader)
	defer r.g.Flush() // the writes proposed here
	for _, p := range parked {
		e := p.e
		if e.state != stateArrived {
			continue
		}
		switch {
		case leading:
			if res, ok := r.g.Recorded(e.info.OpID); ok {
				r.s.answerUnrun(e, &res)
			} else if res := r.unappliable(e); res != nil {
				r.s.answerUnrun(e, res)
			} else {
				r.propose(e)
			}
		case known && (!r.routable(m) || slices.Contains(p.failed, leader) || r.g.LeaderSilent()):
			// Until the tie-breaker hands over, or another leader than
			// the one the client failed at (a late message from it can
			// make this node believe in it again) is elected.
			r.parked = append(r.parked, p)
		case known:
			r.s.redirectUnrun(e, &frame.Redirect{Node: m.Name, Addr: m.Addr, MayHaveRun: p.proposed})
		default:
			r.s.refuse(e, codeNotLeader, "the leader "+leader+" has never been a live member here")
		}
	}
}

// routable reports whether clients may be sent to m: it is in one of the
// failure groups clients route to (a tie-breaker is not), when the server
// knows them.
func (r *replicated) routable(m Member) bool {
	groups := r.s.cfg.Settings.Groups
	return len(groups) == 0 || slices.Contains(groups, m.Group)
}

// member finds a live member by name. It takes no lock.
func (r *replicated) member(name string) (Member, bool) {
	m := r.s.membership()
	if m == nil || name == "" {
		return Member{}, false
	}
	for _, mb := range m.Members() {
		if mb.Name == name {
			return mb, true
		}
	}
	return Member{}, false
}

// read guards a read of the replicated service, brought by attempt a. A
// node that does not serve passes it on to the leader it has heard from
// lately; without one it refuses it, unless it lacks only a leader (an
// election is under way) or a few entries: then the read waits, as does
// a linearizable one until the node has applied every write committed
// before it arrived. It returns the refusal or the redirect, or whether e
// waits (awaitRead) rather than being scheduled now. Called with s.mu
// held.
//
// The redirect costs the read none of its failovers. A node that had
// been frozen and was catching up refused the reads that failed over to
// it from the frozen leader that came after it, and with the default one
// failover they failed beside a new leader that could serve them.
func (r *replicated) read(e *execution, a *frame.Attempt) (refusal *frame.Result, rd *frame.Redirect, wait bool) {
	if !r.g.Serving() {
		if m, ok := r.liveLeader(a); ok && r.routable(m) {
			return nil, &frame.Redirect{Node: m.Name, Addr: m.Addr}, false
		}
		if r.g.MayServeSoon() && !r.s.closed {
			return nil, nil, true
		}
		return r.notServing(), nil, false
	}
	return nil, nil, e.method.Linearizable
}

// awaitRead runs a held read once the node serves and, for a linearizable
// read, once it has applied up to the leader's commit index as of its
// arrival (raft's ReadIndex, which the leader confirms with a round of
// heartbeats). e is registered and waits; it is refused (not executed)
// if that takes longer than a write would wait for an election.
func (r *replicated) awaitRead(e *execution) {
	wait := min(r.parkFor, e.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := r.g.WaitServing(ctx)
	for err == nil && e.method.Linearizable {
		// raft drops a request that finds no leader: ask again.
		tctx, tcancel := context.WithTimeout(ctx, r.cfg.ElectionTimeout)
		var idx uint64
		idx, err = r.g.ReadIndex(tctx)
		tcancel()
		if err == nil {
			err = r.g.WaitApplied(ctx, idx)
			break
		}
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			err = nil // no leader answered within tctx: ask again
		}
	}
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.state != stateArrived {
		return
	}
	// A linearizable read the leader confirmed, and this node has applied
	// to, is served whatever the node's serving status says now: its
	// state holds every write committed before the read arrived, and
	// only committed ones. The status lags apply and elections (it is
	// refreshed once a turn of the raft loop), and a node that came to
	// trail the leader while the read waited, or that had just voted in a
	// new leader, refused reads the new leader had confirmed: in the
	// fault suite's leader-stop, a refused read went on to the frozen
	// leader and failed.
	switch {
	case err == nil && e.method.Linearizable && !r.g.Stopped() && !s.closed,
		err == nil && !e.method.Linearizable && r.g.Serving():
		s.schedule(e)
	case err != nil && e.method.Linearizable:
		s.refuse(e, codeNoRead, "this node could not confirm with a quorum of the voters that it holds every acknowledged write"+within(err, wait))
	default:
		// It waited for the node to serve (or saw it stop): the answer
		// says why the node does not.
		ns := r.notServing()
		s.refuse(e, ns.Code, ns.Message+within(err, wait))
	}
}

// within says how long a held read waited, when err says its wait ran out.
func within(err error, wait time.Duration) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf(" within %s", wait)
	}
	return ""
}

// applying is a committed write being applied through its handler: its
// outcome goes back to the apply goroutine. s.mu guards err; done is
// made once.
type applying struct {
	done chan applyOutcome
	err  error
}

type applyOutcome struct {
	res frame.Result
	err error
}

// report hands the apply goroutine r as the write's outcome, made the
// same on every replica: a Failover a handler returned (a declared error with the
// failover directive, or the method's default) is its result like any
// other, as a Fail, since every node would answer the same. A panic, or a
// handler stopped by a shutdown, did not apply the write: the apply
// goroutine stops there. Called with s.mu held.
func (ap *applying) report(r *frame.Result) {
	switch {
	case r == nil:
	case r.Status == frame.StatusFailover && r.Code == codePanic:
		ap.err = errors.New(r.Message)
	case r.Status == frame.StatusFailover && (r.Code == codeTimeout || r.Code == codeNotStarted):
		// Only a closing server stops a replicated write's handler.
		ap.err = fmt.Errorf("its handler was stopped as the node closed (%s): %w", r.Message, replica.ErrStopped)
	case r.Status == frame.StatusFailover:
		r.Status = frame.StatusFail
	}
	out := applyOutcome{err: ap.err}
	if r != nil {
		out.res = *r
	}
	ap.done <- out
}

// forwardedWrite is a replicated write's result when its handler forwarded.
const forwardedWrite = "a replicated write cannot be forwarded (ForwardTo): it runs on every replica"

// replicaHost is the Host a replicated service's raft group sees.
type replicaHost replicated

var _ replica.Host = (*replicaHost)(nil)

// Apply runs a committed write through the service's handler, in the
// entity queues like any operation on this node, and waits for it: the
// apply goroutine applies one write at a time. The execution of the
// attempt that proposed it, if it waits here, is the one that runs, so
// that its caller gets the result.
func (h *replicaHost) Apply(index uint64, cmd *replica.Command, recorded *frame.Result) (frame.Result, error) {
	r := (*replicated)(h)
	s := r.s
	s.mu.Lock()
	e := r.waiting(cmd.OpID)
	if recorded != nil {
		if e != nil {
			s.answerUnrun(e, recorded)
		}
		s.mu.Unlock()
		return *recorded, nil
	}
	if e == nil {
		var err error
		if e, err = s.applyExec(r, cmd); err != nil {
			s.mu.Unlock()
			return frame.Result{}, err
		}
	}
	ap := &r.applying
	if ap.done == nil {
		ap.done = make(chan applyOutcome, 1)
	}
	ap.err = nil
	e.apply = ap
	e.timeout = applyTimeout
	started := s.enqueue(e)
	s.mu.Unlock()
	if started {
		e.run()
	}
	out := <-ap.done
	return out.res, out.err
}

// waiting takes the execution that waits here for the write opID, if any:
// proposed here, or held for a leader. Called with s.mu held.
func (r *replicated) waiting(opID [16]byte) *execution {
	if e := r.pending[opID]; e != nil {
		delete(r.pending, opID)
		if e.state == stateArrived {
			return e
		}
		return nil
	}
	e := r.s.execs[opID]
	if e == nil || !e.scatter || e.state != stateArrived || e.method.Service != r.name {
		return nil
	}
	r.parked = slices.DeleteFunc(r.parked, func(p parkedWrite) bool { return p.e == e })
	return e
}

// applyExec builds the execution of a committed write that nobody waits
// for here. An error means this node cannot apply it. Called with s.mu
// held.
func (s *Server) applyExec(r *replicated, cmd *replica.Command) (*execution, error) {
	sm := r.reg.methods[cmd.Method]
	if sm == nil {
		return nil, fmt.Errorf("its method %s.%s is not served here", r.name, cmd.Method)
	}
	m := sm.desc
	args := m.NewArgs()
	if err := s.cfg.Codec.Unmarshal(cmd.Payload, args); err != nil {
		return nil, fmt.Errorf("its arguments do not decode here: %v", err)
	}
	e := &execution{
		s:        s,
		method:   m,
		sm:       sm,
		impl:     r.reg.impl,
		args:     args,
		arrived:  time.Now(),
		entities: uniqueEntities(cmd.Entities),
		scatter:  true,
	}
	e.remember.Store(true)
	e.info = AttemptInfo{OpID: cmd.OpID, Entities: cmd.Entities, exec: e}
	if md, err := incomingMD(cmd.MD); err == nil {
		e.info.md = md // the leader validated it; a bad copy costs the metadata, never the write
	}
	if s.execs[cmd.OpID] == nil {
		s.track(e) // a retry that arrives meanwhile joins it
	}
	return e, nil
}

func (h *replicaHost) SnapshotState() ([]byte, bool, error) {
	if h.transfer == nil {
		return nil, false, nil
	}
	b, err := h.transfer.SnapshotState()
	return b, true, err
}

func (h *replicaHost) RestoreState(state []byte) error {
	if h.transfer == nil {
		return errors.New("the service does not implement StateTransfer")
	}
	return h.transfer.RestoreState(state)
}

// LeaderChanged answers the writes proposed here when this node stops
// leading (they may still commit: their callers retry with the same
// operation ID) and resolves the writes held for a leader.
func (h *replicaHost) LeaderChanged(leader string, leading bool) {
	r := (*replicated)(h)
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !leading {
		for id, e := range r.pending {
			delete(r.pending, id)
			if e.state == stateArrived {
				r.moveOn(e, leader, true)
			}
		}
	}
	r.unpark(leader, leading)
}

// CandidacyRefused sends the writes held here for a leader to a voter that
// refused this node's candidacy: its log is ahead, so it can win where
// this node cannot, and it stands for election as soon as a write that
// failed over from the leader reaches it.
func (h *replicaHost) CandidacyRefused(by []string) {
	r := (*replicated)(h)
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := r.parked[:0]
	for _, p := range r.parked {
		if p.e.state != stateArrived {
			continue
		}
		if m, ok := r.standIn(by, p.failed); ok {
			s.redirectUnrun(p.e, &frame.Redirect{Node: m.Name, Addr: m.Addr, MayHaveRun: p.proposed})
			continue
		}
		kept = append(kept, p)
	}
	clear(r.parked[len(kept):])
	r.parked = kept
}

// standIn is the first of the voters named that may lead in this node's
// place: a live member clients route to, which the write has not failed
// at.
func (r *replicated) standIn(voters, failed []string) (Member, bool) {
	for _, v := range voters {
		if v == r.s.cfg.Node || slices.Contains(failed, v) {
			continue
		}
		if m, ok := r.member(v); ok && r.routable(m) {
			return m, true
		}
	}
	return Member{}, false
}

func (h *replicaHost) Dropped(opID [16]byte, _ string) {
	r := (*replicated)(h)
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := r.pending[opID]
	if e == nil {
		return
	}
	delete(r.pending, opID)
	if e.state == stateArrived {
		leader, _ := r.g.Leader()
		r.moveOn(e, leader, false)
	}
}

// moveOn sends a write this node took but no longer leads to the new
// leader, the same attempt with the same operation ID: the new leader
// answers it from the record if the write was committed after all, or
// proposes it, and apply runs it once either way. With no leader to send
// it to, it is answered Failover with code. Called with s.mu held.
func (r *replicated) moveOn(e *execution, leader string, proposed bool) {
	m, ok := r.peer(leader)
	switch {
	case ok && leader != r.s.cfg.Node && r.routable(m):
		r.s.redirectUnrun(e, &frame.Redirect{Node: m.Name, Addr: m.Addr, MayHaveRun: proposed})
	case ok && leader != r.s.cfg.Node:
		// A tie-breaker leads for a moment: the write waits for it to
		// hand over.
		r.park(e, nil)
		r.parked[len(r.parked)-1].proposed = proposed
	case proposed:
		// No leader: the caller fails over at once, told that the write
		// may still commit.
		r.s.refuse(e, codeLeaderLost, "leadership moved while the write waited for its commit; it may still commit")
	default:
		r.s.refuse(e, codeNotLeader, "the write was not taken: this node no longer leads")
	}
}

func (h *replicaHost) Peers() []string {
	s := h.s
	m := s.membership()
	if m == nil {
		return nil
	}
	var out []string
	for _, mb := range m.Members() {
		if mb.Name != s.cfg.Node && mb.Serves(h.name) {
			out = append(out, mb.Name)
		}
	}
	return out
}

// errNoConn reports a peer without a connection yet: one is being dialed.
var errNoConn = errors.New("no connection to the peer yet")

// Send sends a raft message to a peer. raft calls it holding its own lock,
// so it takes only the peers' lock, never the server's.
func (h *replicaHost) Send(to string, kind uint8, body []byte) error {
	r := (*replicated)(h)
	m, ok := r.peer(to)
	if !ok {
		return fmt.Errorf("%s has never been a live member here", to)
	}
	c := r.s.peerConn(m)
	if c == nil {
		return errNoConn
	}
	return c.Send(&frame.Replica{Kind: kind, Service: r.name, Body: body})
}

// peer finds a peer raft sends to, or the leader a follower sends a
// client's attempt on to: the live member of that name, or, when the
// membership does not list it live, the member as it was last listed live.
// raft's own probes then heal the replica as soon as the network heals:
// after a partition that outlasted the failure detector, the membership
// lists the far side live again only once gossip meets it (the LAN
// preset's push-pull, up to half a minute later), and the replica would
// stay behind, unready, until then. A dead peer's address costs a dial
// now and then (the pool backs off); a message that reaches another
// process there is dropped by its group unless it is the same member
// (raft IDs are random per member, kept on disk).
func (r *replicated) peer(name string) (Member, bool) {
	if m, ok := r.member(name); ok {
		if last, ok := r.lastSeen.Load(name); !ok || last.(Member).Addr != m.Addr {
			r.lastSeen.Store(name, m)
		}
		return m, true
	}
	last, ok := r.lastSeen.Load(name)
	if !ok {
		return Member{}, false
	}
	return last.(Member), true
}

// peerConn returns the connection to a peer's server, dialing in the
// background when there is none yet: replication never waits on a dial.
func (s *Server) peerConn(m Member) transport.Conn {
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	if s.peers == nil || m.Addr == "" {
		return nil
	}
	if c := s.peers.Lookup(m.Addr); c != nil {
		return c
	}
	// A connection the peer opened to us carries our messages as well:
	// after a partition heals, one direction may still be backing off its
	// dials while the other already works.
	if c := s.peerIn[m.Name]; c != nil {
		return c
	}
	if s.dialing[m.Addr] {
		return nil
	}
	s.dialing[m.Addr] = true
	p := s.peers
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), peerDialTimeout)
		p.Get(ctx, m.Addr)
		cancel()
		s.peerMu.Lock()
		delete(s.dialing, m.Addr)
		s.peerMu.Unlock()
	}()
	return nil
}

// peerDialTimeout bounds a dial to a peer for replication.
const peerDialTimeout = 2 * time.Second

// A connection to a peer closes once what it sent stays unacknowledged for
// peerUnackedTimeout, and dials to a peer back off up to peerBackoffMax:
// after a partition, raft reaches the far side within about a second of
// the heal, however long the partition lasted. Without them the
// connection that lost its packets stayed open and carried again at TCP's
// next retransmission, seconds after a partition of a few seconds and up
// to two minutes after a long one. A peer's kernel acknowledges at once,
// however busy its process, and a replica reads its connections as the
// frames come (raft messages it has no room for are dropped, not left
// unread): only a peer stopped for longer than the timeout, whose buffers
// fill, has its connection closed, and is redialed once it runs again.
const (
	peerUnackedTimeout = 2 * time.Second
	peerBackoffMax     = time.Second
)

// replicaFrame hands a replication message to its service's group, from
// the listener (a peer that dialed us) or the peer pool.
func (s *Server) replicaFrame(c transport.Conn, f *frame.Replica, inbound bool) {
	from := c.Peer().Node
	if inbound {
		s.peerMu.Lock()
		s.peerIn[from] = c
		s.peerMu.Unlock()
	}
	s.mu.Lock()
	r := s.replicas[f.Service]
	s.mu.Unlock()
	if r == nil {
		return
	}
	if err := r.g.Receive(from, f.Kind, f.Body); err != nil {
		s.cfg.Logger.Warn("ffgen: bad replication message", "peer", from, "service", f.Service, "err", err)
	}
}

// flushReplicas hands each raft group what the frames of a reader's batch
// brought it (replica.Group.Flush): the writes proposed and the messages
// received, in one step. Readers call it where their batches end.
func (s *Server) flushReplicas() {
	if groups := s.replicaGroups.Load(); groups != nil {
		for _, g := range *groups {
			g.Flush()
		}
	}
}

// peerHandler receives the frames of the connections this server dialed
// to its peers.
type peerHandler Server

func (h *peerHandler) HandleFrame(c transport.Conn, f frame.Frame) {
	if rf, ok := f.(*frame.Replica); ok {
		(*Server)(h).replicaFrame(c, rf, false)
	}
}

func (h *peerHandler) HandleBatchEnd() { (*Server)(h).flushReplicas() }

func (h *peerHandler) HandleClose(c transport.Conn, err error) {}
