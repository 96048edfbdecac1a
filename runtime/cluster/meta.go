package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/hashicorp/memberlist"
)

// metaVersion leads the node metadata so that the format can evolve; a
// node ignores peers whose metadata it cannot read.
const metaVersion = 1

// ErrMetaTooLarge is returned by Start when the node's metadata (group,
// RPC address, services) does not fit memberlist's limit.
var ErrMetaTooLarge = errors.New("cluster: node metadata too large")

// nodeMeta is what a node publishes about itself through memberlist.
type nodeMeta struct {
	Leaving    bool // set by Leave before the leave message, see Cluster.Leave
	CatchingUp bool // a replica on the node is behind (Config.Ready)
	Group      string
	RPCAddr    string
	Services   []string
	// Methods: what the node advertises of the methods it serves, by
	// service (runtime.Member.Methods).
	Methods map[string][]runtime.ServedMethod
	// Boot is drawn at random as the process starts (0: not said): the
	// same name with another Boot is a new process (MemberStatus.JoinedAt).
	Boot uint64
}

// meta is what the node configured by c publishes from the process whose
// nodeMeta.Boot is boot.
func (c *Config) meta(leaving, catchingUp bool, boot uint64) nodeMeta {
	return nodeMeta{Leaving: leaving, CatchingUp: catchingUp, Group: c.Group, RPCAddr: c.RPCAddr, Services: c.Services, Methods: c.Methods, Boot: boot}
}

// methodsMark starts a services entry that carries a service's methods,
// not a service's name: "\x00", the service, "\x00", then 8 bytes per
// method (big-endian). The release before schema identity reads every
// entry as a service name and rejects bytes after the list; to it, such
// an entry is a service that nobody calls, so that both releases keep
// reading each other during the rollout.
const methodsMark = "\x00"

// bootMark starts the services entry that carries nodeMeta.Boot, 8 bytes
// (big-endian) after it. To a release that knows methods entries it is
// one that does not decode (the bytes after the second mark are not a
// whole number of methods), which it skips; to the release before, a
// service that nobody calls.
const bootMark = methodsMark + methodsMark + "boot"

// The flag bits of nodeMeta. A node that does not know a bit ignores it.
const (
	metaLeaving    = 1
	metaCatchingUp = 2
)

// encode returns the compact binary form: version, flags, group, RPC
// address, then the count and names of the services, each length-prefixed,
// the entries of their methods among them (methodsMark). What does not fit
// memberlist's limit is left out: first the words of the replicated
// writes' argument fields (a leader then asks this node's writes to carry
// the same arguments as its own), then the methods (peers then take the
// node to serve every method of its services, as before schema identity).
func (m nodeMeta) encode() ([]byte, error) {
	if len(m.Methods) > 0 {
		if b, err := m.encodeWith(m.Methods); err == nil {
			return b, nil
		}
		if b, err := m.encodeWith(withoutArgFields(m.Methods)); err == nil {
			return b, nil
		}
	}
	return m.encodeWith(nil)
}

// withoutArgFields returns methods without the words of argument fields.
func withoutArgFields(methods map[string][]runtime.ServedMethod) map[string][]runtime.ServedMethod {
	out := make(map[string][]runtime.ServedMethod, len(methods))
	for svc, ws := range methods {
		out[svc] = slices.DeleteFunc(slices.Clone(ws), runtime.ServedMethod.ArgField)
	}
	return out
}

func (m nodeMeta) encodeWith(methods map[string][]runtime.ServedMethod) ([]byte, error) {
	var flags byte
	if m.Leaving {
		flags |= metaLeaving
	}
	if m.CatchingUp {
		flags |= metaCatchingUp
	}
	b := []byte{metaVersion, flags}
	b = codec.AppendString(b, m.Group)
	b = codec.AppendString(b, m.RPCAddr)
	var entries []string
	if m.Boot != 0 {
		entries = append(entries, string(binary.BigEndian.AppendUint64([]byte(bootMark), m.Boot)))
	}
	for _, svc := range slices.Sorted(maps.Keys(methods)) {
		ws := methods[svc]
		e := make([]byte, 0, len(svc)+2+8*len(ws))
		e = append(append(append(e, methodsMark...), svc...), methodsMark...)
		for _, w := range ws {
			e = binary.BigEndian.AppendUint64(e, uint64(w))
		}
		entries = append(entries, string(e))
	}
	b = codec.AppendUvarint(b, uint64(len(m.Services)+len(entries)))
	for _, s := range m.Services {
		b = codec.AppendString(b, s)
	}
	for _, e := range entries {
		b = codec.AppendString(b, e)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes for group, RPC address and %d services, limit %d",
			ErrMetaTooLarge, len(b), len(m.Services), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (nodeMeta, error) {
	if len(b) == 0 {
		return nodeMeta{}, errors.New("cluster: node has no metadata")
	}
	if b[0] != metaVersion {
		return nodeMeta{}, fmt.Errorf("cluster: node metadata version %d, want %d", b[0], metaVersion)
	}
	r := codec.NewReader(b[1:])
	flags := r.Byte()
	m := nodeMeta{Leaving: flags&metaLeaving != 0, CatchingUp: flags&metaCatchingUp != 0, Group: r.String(), RPCAddr: r.String()}
	if n := r.Len32(); n > 0 {
		m.Services = make([]string, 0, n)
		for range n {
			e := r.String()
			if boot, ok := bootEntry(e); ok {
				m.Boot = boot
			} else if svc, ws, ok := methodsEntry(e); ok {
				if m.Methods == nil {
					m.Methods = map[string][]runtime.ServedMethod{}
				}
				m.Methods[svc] = ws
			} else if !strings.HasPrefix(e, methodsMark) {
				m.Services = append(m.Services, e)
			}
		}
	}
	if err := r.Done(); err != nil {
		return nodeMeta{}, fmt.Errorf("cluster: bad node metadata: %w", err)
	}
	return m, nil
}

// bootEntry decodes the services entry that carries nodeMeta.Boot.
func bootEntry(e string) (uint64, bool) {
	rest, ok := strings.CutPrefix(e, bootMark)
	if !ok || len(rest) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(rest)), true
}

// methodsEntry decodes a services entry that carries a service's methods.
func methodsEntry(e string) (svc string, ws []runtime.ServedMethod, ok bool) {
	rest, ok := strings.CutPrefix(e, methodsMark)
	if !ok {
		return "", nil, false
	}
	svc, rest, ok = strings.Cut(rest, methodsMark)
	if !ok || len(rest)%8 != 0 {
		return "", nil, false
	}
	ws = make([]runtime.ServedMethod, 0, len(rest)/8)
	for ; len(rest) > 0; rest = rest[8:] {
		ws = append(ws, runtime.ServedMethod(binary.BigEndian.Uint64([]byte(rest[:8]))))
	}
	slices.Sort(ws)
	return svc, ws, true
}

func (m nodeMeta) member(name string) runtime.Member {
	return runtime.Member{Name: name, Group: m.Group, Addr: m.RPCAddr, Services: m.Services, Methods: m.Methods}
}
