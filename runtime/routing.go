package runtime

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Routing is rendezvous (highest random weight) hashing, twice: the
// configured failure groups are ordered per entity by score, and within a
// group the owner is the live member with the highest score. Joining or
// leaving moves only the entities whose top choice changes: about 1/n of
// a group of n members, and only to or from that member.
//
// score(entity, name) = fmix64(xxhash64(entity) XOR h(name)), where fmix64
// is the murmur3 64-bit finalizer and h(name) is xxhash64(name) for a
// member and xxhash64(name) XOR groupDomain for a group, so a group and a
// member that share a name still score independently. Ties, which need a
// 64-bit collision, go to the lower group index or member name. The
// function is part of the protocol: every node of a cluster, whatever its
// version, must route alike, and TestRoutingGolden pins it.

// groupDomain separates the hashes of group names from those of members.
const groupDomain = 0x9e3779b97f4a7c15

// fmix64 is the murmur3 finalizer: a bijection that spreads every input
// bit over the output.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

func score(entityHash, nameHash uint64) uint64 { return fmix64(entityHash ^ nameHash) }

// router answers which node an entity's operation goes to. Every client
// and server keeps one of its own, fed by its membership; two routers given
// the same membership view give the same answers (Client.Route shows a
// client's). Reads are lock-free and allocation-free over an immutable
// table that update replaces; it is safe for concurrent use.
type router struct {
	groups     []string
	groupHash  []uint64
	groupIndex map[string]int
	table      atomic.Pointer[routeTable]
}

// routeTable is one membership view, never modified once published.
type routeTable struct {
	services map[string]*serviceRoutes
	mixed    bool // some service is mixed: a rollout is under way
}

// serviceRoutes are the members that serve one service.
type serviceRoutes struct {
	byGroup []groupRoutes // by configured group index
	all     []Member      // by group index, then name
	// mixed: its members do not all advertise the same methods (a
	// rollout is under way), so an owner is checked for the call's method.
	mixed bool
}

// groupRoutes are one group's members of a service, sorted by name, with
// their name hashes apart so that the owner search scans 8-byte words.
type groupRoutes struct {
	hashes  []uint64 // xxhash64 of each member's name
	members []Member
}

type hashedMember struct {
	hash uint64
	Member
}

// newRouter returns a router for the configured groups (as checked by
// Settings.Validate: the same order on every node) with no members.
func newRouter(groups []string) *router {
	r := &router{
		groups:     slices.Clone(groups),
		groupHash:  make([]uint64, len(groups)),
		groupIndex: make(map[string]int, len(groups)),
	}
	for i, g := range r.groups {
		r.groupHash[i] = xxhash.Sum64String(g) ^ groupDomain
		if _, dup := r.groupIndex[g]; !dup {
			r.groupIndex[g] = i
		}
	}
	r.table.Store(&routeTable{})
	return r
}

// update replaces the membership view. It returns the members it ignored:
// those with an empty name or a failure group that is not configured, and
// repeats of a name already seen (the first one counts). A member catching
// up is left out while its group has another that is not. Routing does
// not depend on the order of members.
func (r *router) update(members []Member) (ignored []Member) {
	ms := make([]hashedMember, 0, len(members))
	seen := make(map[string]bool, len(members))
	serving := make(map[string]bool) // groups with a member not catching up
	for _, m := range members {
		if _, ok := r.groupIndex[m.Group]; !ok || m.Name == "" || seen[m.Name] {
			ignored = append(ignored, m)
			continue
		}
		seen[m.Name] = true
		serving[m.Group] = serving[m.Group] || !m.CatchingUp
		ms = append(ms, hashedMember{hash: xxhash.Sum64String(m.Name), Member: m})
	}
	// A node that catches up would refuse the calls: they go to the
	// others of its group, unless it is all the group has.
	ms = slices.DeleteFunc(ms, func(m hashedMember) bool { return m.CatchingUp && serving[m.Group] })
	slices.SortFunc(ms, func(a, b hashedMember) int {
		return cmp.Or(cmp.Compare(r.groupIndex[a.Group], r.groupIndex[b.Group]), cmp.Compare(a.Name, b.Name))
	})

	t := &routeTable{services: make(map[string]*serviceRoutes)}
	for _, m := range ms {
		for _, svc := range m.Services {
			sr := t.services[svc]
			if sr == nil {
				sr = &serviceRoutes{byGroup: make([]groupRoutes, len(r.groups))}
				t.services[svc] = sr
			}
			if n := len(sr.all); n > 0 && sr.all[n-1].Name == m.Name {
				continue // the service is listed twice
			}
			if len(sr.all) > 0 && !slices.Equal(sr.all[0].Methods[svc], m.Methods[svc]) {
				sr.mixed, t.mixed = true, true
			}
			gr := &sr.byGroup[r.groupIndex[m.Group]]
			gr.hashes = append(gr.hashes, m.hash)
			gr.members = append(gr.members, m.Member)
			sr.all = append(sr.all, m.Member)
		}
	}
	r.table.Store(t)
	return ignored
}

// entityKey is an entity ID's routing hash. A client that looks up the
// same entity more than once (the group order, then an owner per attempt)
// computes it once with keyOf and uses the *Key methods.
type entityKey uint64

// keyOf returns the entity's routing hash.
func keyOf(entity string) entityKey { return entityKey(xxhash.Sum64String(entity)) }

// groupOrder appends to dst[:0] the indexes of the configured groups in
// the entity's order, highest score first, and returns it. It does not
// allocate when cap(dst) >= len(r.groups).
func (r *router) groupOrder(entity string, dst []int) []int {
	return r.groupOrderKey(keyOf(entity), dst)
}

// groupOrderKey is groupOrder for a precomputed key.
func (r *router) groupOrderKey(k entityKey, dst []int) []int {
	eh := uint64(k)
	dst = dst[:0]
	// Insertion sort: there are a handful of groups, and recomputing a
	// score is cheaper than a scratch slice.
	for i, gh := range r.groupHash {
		s := score(eh, gh)
		j := len(dst)
		dst = append(dst, i)
		for ; j > 0 && score(eh, r.groupHash[dst[j-1]]) < s; j-- {
			dst[j] = dst[j-1]
		}
		dst[j] = i
	}
	return dst
}

// owner returns the live member of the group (an index into r.groups) that
// serves service and has the highest score for entity, passing over the
// members for which skip (if not nil) returns true, so a client that
// suspects the owner gets the next-best member of the same group. It
// reports false if no member is left.
func (r *router) owner(service string, group int, entity string, skip func(name string) bool) (Member, bool) {
	return r.ownerKey(service, group, keyOf(entity), skip)
}

// ownerKey is owner for a precomputed key.
func (r *router) ownerKey(service string, group int, k entityKey, skip func(name string) bool) (Member, bool) {
	return r.ownerFor(service, nil, group, k, skip)
}

// ownerFor is owner for a call of method (nil: any method of the
// service). While the service's members advertise different methods (a
// rollout), it passes over a member that does not serve method
// compatibly, unless no member of the group does: that one then answers
// ErrUnimplemented, a refusal that costs nothing.
func (r *router) ownerFor(service string, method *MethodDesc, group int, k entityKey, skip func(name string) bool) (Member, bool) {
	gr, want := r.routesFor(service, method, group)
	if gr == nil {
		return Member{}, false
	}
	for {
		if m, ok := gr.owner(uint64(k), service, want, skip); ok || want == 0 {
			return m, ok
		}
		want = 0
	}
}

// takes reports whether group has a member, other than those skip names,
// that serves method: ownerFor without its fallback to a member that would
// refuse the call as unimplemented.
func (r *router) takes(service string, method *MethodDesc, group int, k entityKey, skip func(name string) bool) bool {
	gr, want := r.routesFor(service, method, group)
	if gr == nil {
		return false
	}
	_, ok := gr.owner(uint64(k), service, want, skip)
	return ok
}

// routesFor returns the members of group that serve service, and what a
// member must advertise to serve method: 0 (anything) unless the
// service's members differ in what they advertise.
func (r *router) routesFor(service string, method *MethodDesc, group int) (*groupRoutes, ServedMethod) {
	sr := r.table.Load().services[service]
	if sr == nil || group < 0 || group >= len(sr.byGroup) {
		return nil, 0
	}
	var want ServedMethod
	if method != nil && sr.mixed {
		want = servedOf(method)
	}
	return &sr.byGroup[group], want
}

// methodOrder is groupOrderKey for a call of method: while the service's
// members differ in the methods they advertise (a rollout), it leaves out
// the groups with no member that serves method, unless no group has one.
// Sent there, the call would be refused as unimplemented and spend one of
// the operation's failovers on it: a method that only upgraded nodes
// serve, whose entity's first group had none yet, failed whenever its
// owner in the next group was draining.
func (r *router) methodOrder(service string, method *MethodDesc, k entityKey, dst []int) []int {
	dst = r.groupOrderKey(k, dst)
	t := r.table.Load()
	if !t.mixed || method == nil {
		return dst // outside rollouts, the order is the entity's
	}
	sr := t.services[service]
	if sr == nil || !sr.mixed {
		return dst
	}
	want := servedOf(method)
	serves := func(g int) bool {
		gr := &sr.byGroup[g]
		return slices.ContainsFunc(gr.members, func(m Member) bool { return m.servesMethod(service, want) })
	}
	if !slices.ContainsFunc(dst, serves) {
		return dst
	}
	return slices.DeleteFunc(dst, func(g int) bool { return !serves(g) })
}

// owner is the member with the highest score for the entity hash eh,
// passing over those skip names and, unless want is 0, those that do not
// serve the method it advertises.
func (gr *groupRoutes) owner(eh uint64, service string, want ServedMethod, skip func(name string) bool) (Member, bool) {
	best, found := -1, false
	var bestScore uint64
	for i, h := range gr.hashes {
		s := score(eh, h)
		// Members are sorted by name: on a tie the first (lower) name stays.
		if found && s <= bestScore {
			continue
		}
		if skip != nil && skip(gr.members[i].Name) {
			continue
		}
		if want != 0 && !gr.members[i].servesMethod(service, want) {
			continue
		}
		best, bestScore, found = i, s, true
	}
	if !found {
		return Member{}, false
	}
	return gr.members[best], true
}

// members returns every live member that serves service, ordered by group
// index and then by name (the same on every node). The caller must not
// modify it.
func (r *router) members(service string) []Member {
	if sr := r.table.Load().services[service]; sr != nil {
		return sr.all
	}
	return nil
}

// Route returns the nodes an operation of service on entity is sent to,
// in the order a client tries them: the entity's owner in each failure
// group, best group first, as every client and node computes it from the
// same membership view (groups as in Settings.Groups). A group with no
// member serving service has no entry. A client also passes over the
// nodes it suspects for now; Route does not know them.
func Route(groups []string, members []Member, service, entity string) []Member {
	r := newRouter(groups)
	r.update(members)
	var out []Member
	for _, g := range r.groupOrder(entity, nil) {
		if m, ok := r.owner(service, g, entity, nil); ok {
			out = append(out, m)
		}
	}
	return out
}
