package runtime

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime/codec"
)

// operation is one Invoke: the attempts it made and what they reported.
type operation struct {
	// Set by Invoke's goroutine before the first attempt, read only after.
	c        *Client
	m        *MethodDesc
	s        Settings
	id       [16]byte
	reply    codec.Message
	payload  []byte
	md       []string // the outgoing metadata as the Attempt frame carries it
	entities []string
	key      string // routes the attempts: the first entity, or the service's leader key
	noRepeat bool   // no attempt goes to a node twice: servers need not remember the result
	// leader takes the first attempt of a replicated write or a
	// linearizable read, when the client knows it (client_leaderhint.go).
	leader   Member
	start    time.Time
	deadline time.Time // the operation deadline; ctx may end sooner

	// Owned by Invoke's goroutine.
	entityBuf [2]string
	groupBuf  [8]int
	sentBuf   sent        // the attempt in flight, for modes with one at a time
	timer     *time.Timer // their attempt timer

	trackPrev, trackNext *operation // the other operations in its shard of the client's table; guarded by the shard's lock

	refusals atomic.Int32 // attempts refused so far; pick passes over their nodes

	mu       sync.Mutex // guards the following: a hedge's attempts run concurrently, and InFlight reads them
	history  []historyEntry
	histBuf  [2]historyEntry // history's first backing array
	last     []byte          // progress
	node     string          // node of the latest attempt, for InFlight
	attempts int
}

// sequential is the failover mode: one attempt at a time along the routing
// key's group order, wrapping around when max failovers exceeds the groups.
// flags is FlagScatter for a replicated write, which goes to the service's
// raft leader (client_leaderhint.go) and then the same way.
//
// n numbers the attempts, pos is their place along the order: a refused
// attempt whose group has another node to take it is made again there, at
// the same place, so it spends none of the operation's failovers
// (sameGroupAfter).
func (op *operation) sequential(ctx context.Context, flags frame.AttemptFlags) error {
	order := op.c.router.methodOrder(op.m.Service, op.m, keyOf(op.key), op.groupBuf[:0])
	if op.s.MaxFailovers >= len(order) {
		// A rollout's order can be shorter than the groups: its
		// attempts may come back to a node, which must remember.
		op.noRepeat = false
	}
	var last outcome
	routed := false
	for n, pos := 0, 0; pos <= op.lastAttempt(); n++ {
		// An attempt is started only with time left: one that could not
		// be sent would stand in the history as if it had been tried.
		if r, err := callerEnded(ctx); err != nil {
			return op.fail(r, err)
		}
		if op.c.closed.Load() {
			return op.fail(ReasonClosed, ErrClientClosed)
		}
		if n > 0 && !time.Now().Before(op.deadline) {
			break
		}
		if n > 0 && paidFailover(last.reason) {
			if r, err := op.takeBudget(ctx, last.reason); err != nil {
				return op.fail(r, err)
			}
		}
		last = op.try(ctx, order, n, pos, flags, pos == op.lastAttempt() && !routed)
		if last.final() {
			return op.conclude(last)
		}
		if last.reason == ReasonTooLarge || last.reason == ReasonOverloaded {
			// No node can take it; or the node is busy, not dead, and
			// failing over would only carry the load elsewhere.
			return op.fail(last.reason, last.err)
		}
		routed = routed || last.member.Name != ""
		if last.reason == ReasonDeadline || last.reason == ReasonCancelled {
			break
		}
		if last.reason == ReasonRefused && !op.anyoneLeft(order) {
			break
		}
		if !op.sameGroupAfter(last) {
			pos++
		}
	}
	if !routed {
		return op.fail(last.reason, fmt.Errorf("%w: %s", ErrNoRoute, last.err))
	}
	return op.fail(last.reason, last.err)
}

// lastAttempt is the number of the operation's last attempt: MaxFailovers,
// and one more for a read whose first attempt goes to the leader, outside
// its entity's order, so that trying the leader costs the read none of the
// failovers it would make along its entity's groups. In a rolling
// restart, a read the draining leader refused and whose entity's first
// group was suspected (its nodes had restarted a moment before) failed
// without reaching the entity's other group.
func (op *operation) lastAttempt() int {
	if op.readAtLeader() {
		return op.s.MaxFailovers + 1
	}
	return op.s.MaxFailovers
}

// readAtLeader reports whether the operation is a read whose first
// attempt goes to the leader, outside its entity's order.
func (op *operation) readAtLeader() bool {
	return op.leader.Name != "" && op.m.Mode != ModeScatter
}

// callerEnded reports whether ctx has ended, counting a deadline that has
// passed although the context's own timer has not fired yet: an attempt
// started then could not be sent.
func callerEnded(ctx context.Context) (Reason, error) {
	if ctx.Err() != nil {
		return ctxReason(ctx), context.Cause(ctx)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return ReasonDeadline, context.DeadlineExceeded
	}
	return ReasonNone, nil
}

// takeBudget spends a failover token, waiting no longer than the operation
// deadline. A wait that the caller's context or the deadline ended is
// reported as such, not as a spent budget.
func (op *operation) takeBudget(ctx context.Context, why Reason) (Reason, error) {
	op.c.cfg.Metrics.Failover(op.m.Service, op.m.Name, why)
	if r := op.c.reporter; r != nil {
		r.ReportFailover(op.m.Service, op.m.Name, why)
	}
	bctx, cancel := context.WithDeadline(ctx, op.deadline)
	defer cancel()
	err := op.c.budget.Take(bctx)
	switch {
	case err == nil:
		return ReasonNone, nil
	case ctx.Err() != nil:
		return ctxReason(ctx), err
	case bctx.Err() != nil:
		return ReasonDeadline, err
	}
	return ReasonBudget, err
}

// paidFailover reports whether a failover after r spends the budget: only
// failovers that follow a tried attempt do (sent, or its node could not be
// dialed or its queue was full); routing around a suspected or absent node
// costs the cluster nothing.
func paidFailover(r Reason) bool {
	switch r {
	case ReasonSuspected, ReasonNoMember, ReasonNone, ReasonRefused, ReasonOverloaded:
		return false
	}
	return true
}

// try makes attempt n at place pos of the order: in group
// order[pos % len(order)], or at the leader first.
// lastChance ignores suspicion: when every earlier attempt was skipped, the
// last one goes to a suspected owner rather than fail without trying.
func (op *operation) try(ctx context.Context, order []int, n, pos int, flags frame.AttemptFlags, lastChance bool) outcome {
	var member Member
	var reason Reason
	var groupName string
	if pos == 0 && op.leader.Name != "" {
		member, groupName = op.leader, op.leader.Group
	} else {
		// A write's key is the leader's, and its failovers go that way,
		// the leader's group last once the leader failed. A read's
		// failovers take its entity's order from the first group, passing
		// over the leader there.
		var group int
		avoid := ""
		switch {
		case op.readAtLeader():
			group, avoid = order[(pos-1)%len(order)], op.leader.Name
		case op.leader.Name != "":
			group = op.awayFromLeader(order, pos-1)
		default:
			group = order[pos%len(order)]
		}
		groupName = op.c.router.groups[group]
		member, reason = op.pick(group, lastChance, avoid)
	}
	if reason != ReasonNone {
		o := outcome{number: n, pos: pos, member: Member{Group: groupName}, reason: reason,
			err: fmt.Errorf("group %s: %s", groupName, reason)}
		if reason == ReasonRefused {
			o.err = fmt.Errorf("group %s: every node refused the operation: %w", groupName, op.lastRefusal())
		}
		op.record(o)
		return o
	}
	op.mu.Lock()
	op.node = member.Name
	op.attempts = n + 1
	op.mu.Unlock()
	o := op.attempt(ctx, member, n, flags)
	o.pos, o.redirected = pos, o.member.Name != member.Name
	op.record(o)
	return o
}

// awayFromLeader returns the group of a write's k-th failover from the
// leader it was sent to first: the key's order with the leader's group
// moved last. A failure group is what fails together, so the first
// failover leaves the leader's; taken in the key's order, it stayed there
// whenever the leader's group came second, and one failover was all a
// write had by default: with the leader frozen and its group-mate
// suspected since an earlier freeze, the write failed unsent ("group a:
// suspected") beside a live group that could elect a leader.
func (op *operation) awayFromLeader(order []int, k int) int {
	groups := op.c.router.groups
	li := -1
	for i, g := range order {
		if groups[g] == op.leader.Group {
			li = i
			break
		}
	}
	if li < 0 { // not a group of the key's: the key's order as it is
		return order[(k+1)%len(order)]
	}
	j := k % len(order)
	switch {
	case j < li:
		return order[j]
	case j < len(order)-1:
		return order[j+1]
	}
	return order[li]
}

// pick chooses the entity's owner in group, skipping suspected nodes and
// those that refused the operation.
func (op *operation) pick(group int, ignoreSuspicion bool, avoid string) (Member, Reason) {
	r := op.c.router
	refused := op.refusedSkip()
	skip := op.passOver(refused)
	k := keyOf(op.key)
	if avoid != "" {
		m, ok := r.ownerFor(op.m.Service, op.m, group, k, func(name string) bool {
			return name == avoid || (skip != nil && skip(name))
		})
		if ok {
			return m, ReasonNone
		}
		// The group has no other node to take it: avoid may still.
	}
	if m, ok := r.ownerFor(op.m.Service, op.m, group, k, skip); ok {
		return m, ReasonNone
	}
	if m, ok := r.ownerFor(op.m.Service, op.m, group, k, refused); ok {
		if ignoreSuspicion {
			return m, ReasonNone
		}
		return Member{}, ReasonSuspected
	}
	if refused != nil {
		if _, ok := r.ownerFor(op.m.Service, op.m, group, k, nil); ok {
			return Member{}, ReasonRefused
		}
	}
	return Member{}, ReasonNoMember
}

// passOver returns the nodes pick passes over: those the client suspects
// and those refused (refusedSkip); nil if there are none, which in the
// common case takes no lock at all.
func (op *operation) passOver(refused func(string) bool) func(string) bool {
	var suspected func(string) bool
	if op.c.nsuspect.Load() > 0 {
		suspected = op.c.suspected
	}
	switch {
	case refused == nil:
		return suspected
	case suspected == nil:
		return refused
	}
	return func(name string) bool { return refused(name) || suspected(name) }
}

// refusedSkip returns op.refusedBy, or nil while no node has refused the
// operation. A refusal says the node runs nothing of it now (it drains,
// catches up, or does not serve the method yet), so the operation does
// not ask it again.
func (op *operation) refusedSkip() func(string) bool {
	if op.refusals.Load() == 0 {
		return nil
	}
	return op.refusedBy
}

// refusedBy reports whether node refused the operation.
func (op *operation) refusedBy(node string) bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	for _, h := range op.history {
		if h.Reason == ReasonRefused && h.Node == node {
			return true
		}
	}
	return false
}

// lastRefusal returns the error of the operation's latest refusal.
func (op *operation) lastRefusal() error {
	op.mu.Lock()
	defer op.mu.Unlock()
	for i := len(op.history) - 1; i >= 0; i-- {
		if h := op.history[i]; h.Reason == ReasonRefused && h.Node != "" {
			return h.Err
		}
	}
	return errors.New("refused")
}

// anyoneLeft reports whether a group of the order has a node that serves
// the operation and has not refused it: once none has, asking on would
// only be refused again.
func (op *operation) anyoneLeft(order []int) bool {
	r, k, refused := op.c.router, keyOf(op.key), op.refusedSkip()
	return slices.ContainsFunc(order, func(g int) bool { return r.takes(op.m.Service, op.m, g, k, refused) })
}

// sameGroupAfter reports whether the attempt after o stays at o's place
// along the order: o was refused by the node routing chose there (not
// the leader tried first, nor a node it redirected to), whose group has
// another node to take the attempt.
// A refusal is its node's own (it drains, it catches up, it does not serve
// the method yet), and the group's next node is where the entity goes once
// that node has left. Moving on to the next group spent a failover on the
// refusal: a call refused by the first group and then by the second
// group's draining owner failed beside that owner's group-mate.
func (op *operation) sameGroupAfter(o outcome) bool {
	if o.reason != ReasonRefused || o.member.Name == "" || o.redirected || (o.pos == 0 && op.leader.Name != "") {
		return false
	}
	r := op.c.router
	group, ok := r.groupIndex[o.member.Group]
	return ok && r.takes(op.m.Service, op.m, group, keyOf(op.key), op.passOver(op.refusedSkip()))
}

// concurrent is the hedge mode: attempts follow the group order, and the next
// one starts when the previous fails over or after delay without an answer.
// The first final answer wins; the others are cancelled. As in sequential,
// a refused attempt whose group has another node to take it is made again
// there without moving along the order.
func (op *operation) concurrent(ctx context.Context, delay time.Duration) error {
	order := op.c.router.methodOrder(op.m.Service, op.m, keyOf(op.key), op.groupBuf[:0])
	ctx, cancel := context.WithDeadline(ctx, op.deadline)
	defer cancel()
	// At most lastAttempt()+1 attempts run at once, which is all that
	// may be left to send here once the operation has returned: an
	// attempt made again in its group starts when none runs.
	results := make(chan outcome, op.lastAttempt()+1)
	hedge := time.NewTimer(delay)
	defer hedge.Stop()
	next, place, running := 0, 0, 0
	// stopped: no further attempt starts; the time is up, or no node can
	// take the attempt. Those in flight are still awaited, so that every
	// attempt sent is in the history.
	stopped, refused := false, false
	start := func(pos int) {
		if stopped {
			return
		}
		if _, err := callerEnded(ctx); err != nil || op.c.closed.Load() {
			refused = true
			return
		}
		n := next
		next++
		running++
		go func() { results <- op.try(ctx, order, n, pos, frame.FlagHedge, false) }()
	}
	startNext := func() {
		place++
		start(place - 1)
	}
	startNext()
	var last outcome
	for running > 0 {
		select {
		case o := <-results:
			running--
			if o.final() {
				return op.conclude(o)
			}
			if last.reason != ReasonTooLarge {
				last = o
			}
			switch o.reason {
			case ReasonTooLarge, ReasonDeadline, ReasonCancelled, ReasonClosed, ReasonOverloaded:
				stopped = true // no node can take it, no time is left, the client closed, or the node is busy
				continue
			case ReasonRefused:
				stopped = stopped || !op.anyoneLeft(order)
			}
			if running > 0 {
				continue
			}
			if op.sameGroupAfter(o) {
				start(o.pos)
				hedge.Reset(delay)
			} else if place <= op.lastAttempt() {
				if paidFailover(o.reason) {
					if r, err := op.takeBudget(ctx, o.reason); err != nil {
						return op.fail(r, err)
					}
				}
				startNext()
				hedge.Reset(delay)
			}
		case <-hedge.C:
			if place <= op.lastAttempt() {
				startNext()
				hedge.Reset(delay)
			}
		}
	}
	if refused { // the next attempt did not start: the context had ended, or the client closed
		if r, err := callerEnded(ctx); err != nil {
			return op.fail(r, err)
		}
		return op.fail(ReasonClosed, ErrClientClosed)
	}
	return op.fail(last.reason, last.err)
}

// conclude ends the operation with a final outcome: its answer, or the
// error a node declared.
func (op *operation) conclude(o outcome) error {
	if o.err != nil {
		if _, isRemote := o.err.(*RemoteError); isRemote {
			floor := Acknowledged
			if o.delivery == Refused {
				floor = Refused
			}
			return op.errorf(ReasonNone, o.err, floor)
		}
		return o.err // a declared Fail error, as itself
	}
	r := o.result
	if err := op.c.cfg.Codec.Unmarshal(r.Payload, op.reply); err != nil {
		return op.errorf(ReasonNone, fmt.Errorf("decode result: %w", err), Acknowledged)
	}
	return nil
}

// fail ends the operation without an answer.
func (op *operation) fail(r Reason, err error) error {
	return op.errorf(r, err, NotDelivered)
}

func (op *operation) errorf(r Reason, err error, floor Delivery) error {
	op.mu.Lock()
	defer op.mu.Unlock()
	d := floor
	for _, h := range op.history {
		if h.delivery > d {
			d = h.delivery
		}
	}
	e := &Error{
		Service:  op.m.Service,
		Method:   op.m.Name,
		OpID:     op.id,
		Reason:   r,
		Delivery: d,
		Err:      err,
	}
	for _, h := range op.history {
		e.History = append(e.History, h.AttemptRecord)
	}
	return e
}

// historyEntry is an ended attempt as the operation records it: what the
// next attempt's frame and the operation's *Error report of it.
type historyEntry struct {
	AttemptRecord
	delivery Delivery
}

func (op *operation) record(o outcome) {
	if o.member.Name != "" { // an attempt was started, not a group skipped
		op.c.cfg.Metrics.AttemptEnded(op.m.Service, op.m.Name, o.reason, o.dur)
		switch {
		case op.m.Mode == ModeScatter:
			op.c.learnLeader(op.m.Service, o.member.Name, o.reason)
		case o.reason != ReasonNone && o.member.Name == op.leader.Name:
			// A read that failed at the leader may say it no longer
			// leads (it drains, it broke); one that succeeded says
			// nothing: any node answers a read.
			op.c.learnLeader(op.m.Service, o.member.Name, o.reason)
		}
	}
	op.mu.Lock()
	if op.history == nil {
		op.history = op.histBuf[:0]
	}
	op.history = append(op.history, historyEntry{
		AttemptRecord: AttemptRecord{Number: o.number, Node: o.member.Name, Group: o.member.Group, Reason: o.reason, Duration: o.dur, Err: o.err},
		delivery:      o.delivery,
	})
	op.mu.Unlock()
	if o.reason == ReasonRefused && o.member.Name != "" {
		op.refusals.Add(1)
		if r := op.c.refresher; r != nil {
			r.Refresh() // the view showed a node that takes the attempt
		}
	}
}

// priors is the history as the next attempt's frame carries it.
func (op *operation) priors() []frame.Prior {
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.history) == 0 {
		return nil
	}
	out := make([]frame.Prior, len(op.history))
	for i, h := range op.history {
		out[i] = frame.Prior{Node: h.Node, Group: h.Group, Reason: uint8(h.Reason)}
	}
	return out
}

// lastReason is why the latest recorded attempt ended.
func (op *operation) lastReason() Reason {
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.history) == 0 {
		return ReasonNone
	}
	return op.history[len(op.history)-1].Reason
}

func (op *operation) progress() []byte {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.last
}

func (op *operation) setProgress(p []byte) {
	op.mu.Lock()
	op.last = p
	op.mu.Unlock()
}

func (op *operation) info() OpInfo {
	op.mu.Lock()
	defer op.mu.Unlock()
	return OpInfo{
		Side:     "client",
		OpID:     hex.EncodeToString(op.id[:]),
		Service:  op.m.Service,
		Method:   op.m.Name,
		Entities: slices.Clone(op.entities), // they may be in op's own entityBuf, which its reuse overwrites
		Attempt:  op.attempts - 1,
		Node:     op.node,
		Started:  op.start,
		State:    "waiting",
	}
}
