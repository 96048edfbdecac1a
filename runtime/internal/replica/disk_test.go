package replica

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

var testIdentity = Identity{Cluster: "c", Node: "n1", Service: "s.S"}

func entries(from, to, term uint64) []*pb.Entry {
	var out []*pb.Entry
	for i := from; i <= to; i++ {
		out = append(out, &pb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(term), Data: []byte{byte(i), 'x', 'y'}})
	}
	return out
}

func openTest(t *testing.T, dir string) (*boltStore, uint64) {
	t.Helper()
	s, id, err := openDisk(dir, testIdentity, false)
	if err != nil {
		t.Fatal(err)
	}
	return s, id
}

// What is saved is loaded back: a snapshot from the leader replaces the
// log, newer entries replace a conflicting suffix, a snapshot taken here
// drops the entries it covers (but for those kept), and the raft ID stays.
func TestStoreSavesAndLoads(t *testing.T) {
	dir := t.TempDir()
	s, id := openTest(t, dir)
	if sv, err := s.load(); err != nil || sv.id != id || sv.snap != nil || len(sv.ents) != 0 {
		t.Fatalf("empty store loads %+v, %v", sv, err)
	}
	hs := &pb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(id), Commit: proto.Uint64(5)}
	if err := s.save(hs, entries(1, 8, 1), nil); err != nil {
		t.Fatal(err)
	}
	// A new leader overwrites 7 and 8.
	if err := s.save(nil, entries(7, 9, 2), nil); err != nil {
		t.Fatal(err)
	}
	snap := &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(4), Term: proto.Uint64(1),
		ConfState: &pb.ConfState{Voters: []uint64{id}}}}
	if err := s.saveSnapshot(snap, 2); err != nil {
		t.Fatal(err)
	}
	older := proto.Clone(snap).(*pb.Snapshot)
	older.Metadata.Index = proto.Uint64(3)
	if err := s.saveSnapshot(older, 3); err != nil {
		t.Fatal(err)
	}
	s.close()
	s, id2 := openTest(t, dir)
	defer s.close()
	if id2 != id {
		t.Errorf("raft ID %x after reopening, %x before", id2, id)
	}
	sv, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	want := append(entries(5, 6, 1), entries(7, 9, 2)...)
	if diff := cmp.Diff(want, sv.ents, protocmp.Transform()); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(snap, sv.snap, protocmp.Transform()); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(hs, sv.hs, protocmp.Transform()); diff != "" {
		t.Errorf("hard state (-want +got):\n%s", diff)
	}
	// A snapshot from the leader replaces the whole log.
	lead := &pb.Snapshot{Data: []byte("newer"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(20), Term: proto.Uint64(3),
		ConfState: &pb.ConfState{Voters: []uint64{id}}}}
	hs20 := &pb.HardState{Term: proto.Uint64(3), Commit: proto.Uint64(20)}
	if err := s.save(hs20, entries(21, 21, 3), lead); err != nil {
		t.Fatal(err)
	}
	if sv, err = s.load(); err != nil || len(sv.ents) != 1 || sv.ents[0].GetIndex() != 21 || sv.snap.GetMetadata().GetIndex() != 20 {
		t.Errorf("after the leader's snapshot: %+v, %v", sv, err)
	}
}

func corruptStore(t *testing.T, change func(b []byte) []byte) error {
	t.Helper()
	dir := t.TempDir()
	s, _ := openTest(t, dir)
	hs := &pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(40)}
	if err := s.save(hs, entries(1, 40, 1), nil); err != nil {
		t.Fatal(err)
	}
	s.close()
	path := filepath.Join(dir, fileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, change(b), 0o600); err != nil {
		t.Fatal(err)
	}
	st, sv, err := openAndLoad(dir, testIdentity, false, 100)
	if err == nil {
		st.close()
		if len(sv.ents) != 40 {
			t.Fatalf("a changed file loaded %d entries without an error", len(sv.ents))
		}
	}
	return err
}

// Flipped bytes in a record are found by its checksum.
func TestStoreFindsFlippedBytes(t *testing.T) {
	err := corruptStore(t, func(b []byte) []byte {
		i := strings.Index(string(b), "\x14xy") // entry 20's data
		if i < 0 {
			t.Fatal("entry 20 not found in the file")
		}
		b[i+1] ^= 0x01
		return b
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "entry 20") {
		t.Errorf("load = %v; want ErrCorrupt naming entry 20", err)
	}
}

// A file cut short, or its meta pages overwritten, is refused rather than
// read past its end.
func TestStoreRefusesTruncatedAndDamagedFiles(t *testing.T) {
	for name, change := range map[string]func([]byte) []byte{
		"truncated":  func(b []byte) []byte { return b[:len(b)/3] },
		"meta pages": func(b []byte) []byte { clear(b[:8192]); return b },
	} {
		t.Run(name, func(t *testing.T) {
			if err := corruptStore(t, change); !errors.Is(err, ErrCorrupt) {
				t.Errorf("load = %v; want ErrCorrupt", err)
			}
		})
	}
}

// An emptied file (the directory deleted, or a crash as the file was
// made) is a new member: a new raft ID, nothing loaded.
func TestStoreEmptiedFileIsANewMember(t *testing.T) {
	dir := t.TempDir()
	s, id := openTest(t, dir)
	s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(3)}, entries(1, 3, 1), nil)
	s.close()
	os.WriteFile(filepath.Join(dir, fileName), nil, 0o600)
	st, sv, err := openAndLoad(dir, testIdentity, false, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if sv.id == id || len(sv.ents) != 0 || sv.snap != nil {
		t.Errorf("emptied file loads %+v (ID %x before)", sv, id)
	}
}

// A directory of another cluster, node or service is refused, naming both.
func TestStoreRefusesForeignIdentity(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTest(t, dir)
	s.close()
	for _, other := range []Identity{
		{Cluster: "d", Node: "n1", Service: "s.S"},
		{Cluster: "c", Node: "n2", Service: "s.S"},
		{Cluster: "c", Node: "n1", Service: "s.T"},
	} {
		_, _, err := openDisk(dir, other, false)
		if !errors.Is(err, ErrForeignDir) || !strings.Contains(err.Error(), testIdentity.String()) || !strings.Contains(err.Error(), other.String()) {
			t.Errorf("open as %v = %v; want ErrForeignDir naming both", other, err)
		}
	}
}

// The commit index is stored only with entries or a vote, so it may lag
// apply; a snapshot raises it to the snapshot's index, or raft restarted
// from the snapshot would find a commit index behind it.
func TestStoreSnapshotRaisesTheCommitIndex(t *testing.T) {
	s, id := openTest(t, t.TempDir())
	defer s.close()
	if err := s.save(&pb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(id), Commit: proto.Uint64(2)}, entries(1, 9, 1), nil); err != nil {
		t.Fatal(err)
	}
	snap := &pb.Snapshot{Data: []byte("s"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(6), Term: proto.Uint64(1),
		ConfState: &pb.ConfState{Voters: []uint64{id}}}}
	if err := s.saveSnapshot(snap, 4); err != nil {
		t.Fatal(err)
	}
	sv, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	if sv.hs.GetCommit() != 6 || sv.hs.GetTerm() != 1 || sv.hs.GetVote() != id {
		t.Errorf("hard state after the snapshot: %v; want commit 6, term and vote kept", sv.hs)
	}
}
