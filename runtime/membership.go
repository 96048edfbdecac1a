package runtime

import "time"

// Member is one node as routing sees it.
type Member struct {
	Name     string   // unique node name
	Group    string   // failure group
	Addr     string   // address of its fast-failover server
	Services []string // services it serves; routing skips it for the others
	// CatchingUp is set while the node does not serve its replicated
	// services (it joins, catches up, or stopped applying): routing goes
	// to the other nodes of its group while there are any. Replication
	// still reaches it.
	CatchingUp bool
	// Methods are what it advertises of the methods it serves, by
	// service (Server.Methods): routing prefers a node that serves a
	// call's method compatibly, and a replicated write is proposed only
	// when every voter serves its method with the same arguments. A
	// service it advertises nothing for counts as serving every method.
	Methods map[string][]ServedMethod
	// JoinedAt is when the membership last saw the node join: its first
	// join, its return after it left or was declared dead, or a new
	// process under its name (zero where the membership does not say). A client forgets its suspicion of a
	// node whose JoinedAt moves, as of one it sees join: the node's process
	// is new, or back, and has failed nothing yet. A restart can be
	// quicker than a view that is read now and then, which then never
	// shows the node gone.
	JoinedAt time.Time
}

// Serves reports whether m serves the named service.
func (m Member) Serves(service string) bool {
	for _, s := range m.Services {
		if s == service {
			return true
		}
	}
	return false
}

// Membership is the live view of the cluster. The static implementation is
// StaticMembership; runtime/cluster implements it on hashicorp/memberlist.
//
// A membership that also has a method ReportFailover(service, method
// string, reason Reason) hears of every failover of the clients that use
// it, as Metrics.Failover does: runtime/cluster's node counts its own
// clients' for its page, and its thin client (Follow) reports them to the
// node it reads from, so that an operator sees failovers that only the
// clients saw.
//
// A membership that also has a method Refresh() is asked to renew its
// view whenever a node refuses a client's attempt (it drains, catches up,
// or does not serve the method), which the view the client routed by did
// not show: runtime/cluster's thin client reads the members again then,
// instead of at its next poll.
type Membership interface {
	// Members returns the live members. The caller must not modify it.
	Members() []Member
	// Subscribe calls fn with the full live set now and after every change,
	// from one goroutine at a time, until the returned cancel is called.
	Subscribe(fn func(members []Member)) (cancel func())
}

// failoverReporter is a Membership that hears of the client's failovers
// (see Membership). It is called once per failover, never on the path of
// a call that does not fail over.
type failoverReporter interface {
	ReportFailover(service, method string, reason Reason)
}

// refresher is a Membership that renews its view on request (see
// Membership). It is called once per refused attempt, never on the path
// of a call that no node refused, and must not block.
type refresher interface {
	Refresh()
}
