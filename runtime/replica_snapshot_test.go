package runtime

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/internal/memnet"
	"github.com/ffgen/ffgen/runtime/transport"
)

// counterState is a replicated counter whose snapshots wait for the test:
// the nth SnapshotState returns the count once release[n] is closed.
type counterState struct {
	n       atomic.Int64
	calls   atomic.Int32
	release [2]chan struct{}
}

func (s *counterState) SnapshotState() ([]byte, error) {
	<-s.release[s.calls.Add(1)-1]
	return codec.AppendVarint(nil, s.n.Load()), nil
}

func (s *counterState) RestoreState([]byte) error { return nil }

type noArgs struct{}

func (*noArgs) AppendFF(b []byte) []byte { return b }
func (*noArgs) UnmarshalFF([]byte) error { return nil }

// snapshotPeer is a peer asking for a snapshot: it keeps what it is sent.
type snapshotPeer struct {
	name string
	mu   sync.Mutex
	got  []fetchedMsg
}

func (p *snapshotPeer) Send(f transport.Frame) error {
	var m fetchedMsg
	if err := decodeReplica(f.(*transport.Replica), &m); err != nil {
		return err
	}
	m.state = append([]byte(nil), m.state...)
	p.mu.Lock()
	p.got = append(p.got, m)
	p.mu.Unlock()
	return nil
}
func (p *snapshotPeer) Peer() transport.Hello { return transport.Hello{Node: p.name} }
func (p *snapshotPeer) Close() error          { return nil }

// Two peers that ask for a snapshot at once are each sent the state of the
// position the snapshot names: no write runs until both are taken. Before,
// the first snapshot to finish resumed the writes while the second was
// still being taken, and the second peer applied a write twice: once in
// the state, once from the log after the position it was told.
func TestConcurrentSnapshotsHoldWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := DefaultSettings()
		s.Groups = []string{"a", "b"}
		net := memnet.NewNetwork()
		defer net.Close()
		members := NewStaticMembership()
		srv := NewServer(ServerConfig{Settings: s, Node: "a1", Membership: members, Logger: slog.New(slog.DiscardHandler)})
		defer srv.Close()
		state := &counterState{release: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
		defer func() { // a failed test must not leave the snapshot waiting
			for _, ch := range state.release {
				select {
				case <-ch:
				default:
					close(ch)
				}
			}
		}()
		incr := &MethodDesc{Service: "test.Counter", Name: "Incr", Mode: ModeScatter,
			Entities: func(codec.Message, []string) []string { return []string{"c"} },
			NewArgs:  func() codec.Message { return new(noArgs) },
			Handle: func(context.Context, any, codec.Message) (codec.Message, error) {
				state.n.Add(1)
				return new(noArgs), nil
			}}
		svc := &ServiceDesc{Name: "test.Counter", Methods: []*MethodDesc{incr}}
		if err := srv.Register(svc, state); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Serve(net.Transport(transport.Config{Node: "a1", Group: "a"}), "a1"); err != nil {
			t.Fatal(err)
		}
		members.Set([]Member{{Name: "a1", Group: "a", Addr: "a1", Services: []string{svc.Name}}})
		for srv.Ready() != nil {
			time.Sleep(10 * time.Millisecond) // fake time
		}
		c, err := NewClient(ClientConfig{Transport: net.Transport(transport.Config{Node: "client"}),
			Membership: members, Settings: s, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Invoke(t.Context(), incr, new(noArgs), new(noArgs)); err != nil {
			t.Fatal(err)
		}

		peers := []*snapshotPeer{{name: "b1"}, {name: "b2"}}
		for _, p := range peers {
			srv.replicaFrame(p, &transport.Replica{Kind: msgFetch, Service: svc.Name, Body: (&fetchMsg{snapshot: true}).encode(nil)}, true)
		}
		written := make(chan error, 1)
		go func() { written <- c.Invoke(context.Background(), incr, new(noArgs), new(noArgs)) }()
		synctest.Wait() // the write is committed; the snapshots hold it
		close(state.release[0])
		synctest.Wait()
		if n := state.n.Load(); n != 1 {
			t.Fatalf("a write ran while the second snapshot was being taken: count %d, want 1", n)
		}
		close(state.release[1])
		if err := <-written; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, p := range peers {
			p.mu.Lock()
			if len(p.got) != 1 {
				t.Fatalf("%s got %d messages, want one snapshot", p.name, len(p.got))
			}
			m := p.got[0]
			p.mu.Unlock()
			r := codec.NewReader(m.state)
			if n := r.Varint(); !m.snapshot || uint64(n) != m.snapAt {
				t.Errorf("%s was sent a count of %d as the state at write %d", p.name, n, m.snapAt)
			}
		}
	})
}
