package replica

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/storage/wal"

	"github.com/ffgen/ffgen/internal/testkit"

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

func openTest(t *testing.T, dir string) (*walStore, uint64) {
	t.Helper()
	s, id, err := openDisk(dir, testIdentity, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s, id
}

func openLoad(dir string) (store, *saved, error) {
	return openAndLoad(dir, testIdentity, false, 100, slog.New(slog.DiscardHandler))
}

func testSnap(index, term, voter uint64, state string) *pb.Snapshot {
	data := (&snapshotData{service: testIdentity.Service, written: newWritten(10), names: map[uint64]string{voter: "n1"}, state: []byte(state)}).marshal()
	return &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(term),
		ConfState: &pb.ConfState{Voters: []uint64{voter}}}}
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
	snap := testSnap(4, 1, id, "state")
	if err := s.saveSnapshot(snap, 2); err != nil {
		t.Fatal(err)
	}
	older := testSnap(3, 1, id, "older")
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
	lead := testSnap(20, 3, id, "newer")
	hs20 := &pb.HardState{Term: proto.Uint64(3), Commit: proto.Uint64(20)}
	if err := s.save(hs20, entries(21, 21, 3), lead); err != nil {
		t.Fatal(err)
	}
	if sv, err = s.load(); err != nil || len(sv.ents) != 1 || sv.ents[0].GetIndex() != 21 || sv.snap.GetMetadata().GetIndex() != 20 || sv.id != id {
		t.Errorf("after the leader's snapshot: %+v, %v", sv, err)
	}
}

// Entries of the old log past a snapshot from the leader never come back:
// raft dropped them with the whole log, and a node that found them again
// would vote with a log it does not have.
func TestStoreLeaderSnapshotDropsTheOldLog(t *testing.T) {
	dir := t.TempDir()
	s, id := openTest(t, dir)
	if err := s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(3)}, entries(1, 30, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.save(&pb.HardState{Term: proto.Uint64(4), Commit: proto.Uint64(20)}, nil, testSnap(20, 2, id, "lead")); err != nil {
		t.Fatal(err)
	}
	s.close()
	st, sv, err := openLoad(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if len(sv.ents) != 0 || sv.snap.GetMetadata().GetIndex() != 20 || sv.hs.GetTerm() != 4 || sv.id != id {
		t.Errorf("after the leader's snapshot and a restart: snapshot %v, %d entries, hard state %v, ID %x (was %x)",
			sv.snap.GetMetadata(), len(sv.ents), sv.hs, sv.id, id)
	}
}

// A crash while a snapshot from the leader replaces the log leaves either
// log whole: the new one once it and its snapshot file are both written,
// the old one before.
func TestStoreCrashInLogReplacement(t *testing.T) {
	for _, crash := range []string{"before the file", "before the renames", "between the renames"} {
		dir := t.TempDir()
		s, id := openTest(t, dir)
		if err := s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(3)}, entries(1, 5, 1), nil); err != nil {
			t.Fatal(err)
		}
		s.close()
		// The new log as replace makes it, made aside.
		other := t.TempDir()
		n, _ := openTest(t, other)
		n.meta = s.meta
		if err := n.save(&pb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(9)}, nil, testSnap(9, 2, id, "lead")); err != nil {
			t.Fatal(err)
		}
		n.close()
		copyDir(t, filepath.Join(other, walDirName), filepath.Join(dir, walDirName+".next"))
		if crash != "before the file" {
			copyDir(t, filepath.Join(other, snapDirName), filepath.Join(dir, snapDirName))
		}
		if crash == "between the renames" {
			os.Rename(filepath.Join(dir, walDirName), filepath.Join(dir, walDirName+".old"))
		}
		st, sv, err := openLoad(dir)
		if err != nil {
			t.Fatal(err)
		}
		st.close()
		if crash == "before the file" && (sv.snap != nil || len(sv.ents) != 5) {
			t.Errorf("crash %s: snapshot %v, %d entries; want the old log", crash, sv.snap.GetMetadata(), len(sv.ents))
		}
		if crash != "before the file" && (sv.snap.GetMetadata().GetIndex() != 9 || len(sv.ents) != 0 || sv.hs.GetTerm() != 2) {
			t.Errorf("crash %s: snapshot %v, %d entries; want the new log", crash, sv.snap.GetMetadata(), len(sv.ents))
		}
		for _, left := range []string{walDirName + ".next", walDirName + ".old"} {
			if _, err := os.Stat(filepath.Join(dir, left)); err == nil {
				t.Errorf("crash %s: %s left behind", crash, left)
			}
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// onlyFile returns the path of dir's one file named ...suffix.
func onlyFile(t *testing.T, dir, suffix string) string {
	t.Helper()
	names := filesWithSuffix(dir, suffix)
	if len(names) != 1 {
		t.Fatalf("%s files in %s: %v; want one", suffix, dir, names)
	}
	return filepath.Join(dir, names[0])
}

// segment returns the path of the store's only WAL segment and the length
// of what is written in it (the rest is preallocated zeros).
func segment(t *testing.T, dir string) (string, int) {
	t.Helper()
	path := onlyFile(t, filepath.Join(dir, walDirName), ".wal")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, len(bytes.TrimRight(b, "\x00"))
}

// corruptStore saves entries 1 to 40, one append each, changes the
// segment, and opens the store again.
func corruptStore(t *testing.T, change func(b []byte, written int) []byte) (*saved, error) {
	t.Helper()
	dir := t.TempDir()
	s, _ := openTest(t, dir)
	for i := uint64(1); i <= 40; i++ {
		if err := s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(i)}, entries(i, i, 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	path, written := segment(t, dir)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, change(b, written), 0o600); err != nil {
		t.Fatal(err)
	}
	st, sv, err := openLoad(dir)
	if err == nil {
		st.close()
	}
	return sv, err
}

// Flipped bytes in a record are found by its checksum.
func TestStoreFindsFlippedBytes(t *testing.T) {
	_, err := corruptStore(t, func(b []byte, _ int) []byte {
		i := bytes.Index(b, []byte("\x14xy")) // entry 20's data
		if i < 0 {
			t.Fatal("entry 20 not found in the file")
		}
		b[i+1] ^= 0x01
		return b
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("load = %v; want ErrCorrupt", err)
	}
}

// A segment whose head is overwritten (its metadata and first records) is
// refused.
func TestStoreRefusesADamagedHead(t *testing.T) {
	_, err := corruptStore(t, func(b []byte, _ int) []byte { clear(b[:64]); return b })
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("load = %v; want ErrCorrupt", err)
	}
}

// A record cut short at the end (a crash mid-append) is a torn tail: cut
// at the last whole record, the store loads what came before it.
func TestStoreCutsATornTail(t *testing.T) {
	sv, err := corruptStore(t, func(b []byte, written int) []byte { return b[:written-5] })
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sv.ents); n != 39 && n != 40 {
		t.Fatalf("loaded %d entries after a torn tail; want 39 or 40", n)
	}
	if diff := cmp.Diff(entries(1, uint64(len(sv.ents)), 1), sv.ents, protocmp.Transform()); diff != "" {
		t.Errorf("entries after a torn tail (-want +got):\n%s", diff)
	}
	if c := sv.hs.GetCommit(); c > uint64(len(sv.ents)) || c < 38 {
		t.Errorf("commit %d with %d entries", c, len(sv.ents))
	}
}

// A deleted log (the directory emptied) is a new member: a new raft ID,
// nothing loaded.
func TestStoreEmptiedDirIsANewMember(t *testing.T) {
	dir := t.TempDir()
	s, id := openTest(t, dir)
	s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(3)}, entries(1, 3, 1), nil)
	s.close()
	os.RemoveAll(filepath.Join(dir, walDirName))
	st, sv, err := openLoad(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if sv.id == id || len(sv.ents) != 0 || sv.snap != nil {
		t.Errorf("emptied directory loads %+v (ID %x before)", sv, id)
	}
}

// A crash that cut short setting the state aside (the log moved, the
// snapshots not yet) is finished at the next start: both land in the
// directory named before the first rename, and the node starts as a new
// member without calling its state corrupt. The snapshots left without
// their log read as a corrupt store before. A pending file cut short
// itself, before anything moved, is dropped.
func TestSetAsideFinishesAfterACrash(t *testing.T) {
	dir := t.TempDir()
	s, id := openTest(t, dir)
	if err := s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(6)}, entries(1, 6, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.saveSnapshot(testSnap(4, 1, id, "state"), 2); err != nil {
		t.Fatal(err)
	}
	s.close()
	// setAside's first steps, and the crash.
	aside := asideDir(dir, "removed")
	if err := os.MkdirAll(aside, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, asidePending), []byte(filepath.Base(aside)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, walDirName), filepath.Join(aside, walDirName)); err != nil {
		t.Fatal(err)
	}

	var logs testkit.LogBuffer
	cfg := Config{Cluster: testIdentity.Cluster, Node: testIdentity.Node, Service: testIdentity.Service, Dir: dir, RememberWrites: 100}
	st, sv, err := openStore(cfg, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	st.close()
	if sv.id == id || sv.snap != nil || len(sv.ents) != 0 {
		t.Errorf("the store after the crash loads %+v (ID %x before): want a new member's", sv, id)
	}
	if l := logs.String(); strings.Contains(l, "corrupt") || !strings.Contains(l, "cut short setting the replicated state aside") {
		t.Errorf("log:\n%s\nwant the setting aside finished, and no word of corruption", l)
	}
	for _, name := range []string{walDirName, snapDirName} {
		if _, err := os.Stat(filepath.Join(aside, name)); err != nil {
			t.Errorf("%s is not in %s: %v", name, aside, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, asidePending)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left: %v", asidePending, err)
	}

	// Another process holding the directory finds nothing of its own
	// moved by this one's start.
	if err := os.WriteFile(filepath.Join(dir, asidePending), []byte(filepath.Base(aside)), 0o600); err != nil {
		t.Fatal(err)
	}
	held, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := openStore(cfg, logs.Logger()); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("start beside a process holding the directory: %v, want it refused as in use", err)
	}
	if _, err := os.Stat(filepath.Join(dir, walDirName)); err != nil {
		t.Errorf("the other process's log was moved: %v", err)
	}
	held.Close()
	if err := os.Remove(filepath.Join(dir, asidePending)); err != nil {
		t.Fatal(err)
	}

	// A pending file written only in part names nothing: it goes, and
	// the store is left as it is.
	if err := os.WriteFile(filepath.Join(dir, asidePending), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st, sv2, err := openStore(cfg, logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	st.close()
	if sv2.id != sv.id {
		t.Errorf("an empty pending file changed the raft ID from %x to %x", sv.id, sv2.id)
	}
	if _, err := os.Stat(filepath.Join(dir, asidePending)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an empty %s left: %v", asidePending, err)
	}
}

// A snapshot file that does not check is refused, and logged at error
// level. While the log still holds every entry the snapshot covered, the
// node rebuilds its state from the log; once the log was compacted to it,
// the store is corrupt (and set aside by openStore).
func TestStoreRefusesABrokenSnapshot(t *testing.T) {
	defer func(size int64) { wal.SegmentSizeBytes = size }(wal.SegmentSizeBytes)
	wal.SegmentSizeBytes = 2048
	for _, compacted := range []bool{false, true} {
		dir := t.TempDir()
		s, id := openTest(t, dir)
		last := uint64(9)
		if compacted {
			last = 400
		}
		for i := uint64(1); i <= last; i += 10 {
			if err := s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(min(i+9, last))}, entries(i, min(i+9, last), 1), nil); err != nil {
				t.Fatal(err)
			}
		}
		at := uint64(6)
		if compacted {
			at = 350
		}
		if err := s.saveSnapshot(testSnap(at, 1, id, "the state at six"), at-2); err != nil {
			t.Fatal(err)
		}
		s.close()
		path := onlyFile(t, filepath.Join(dir, snapDirName), ".snap")
		b, _ := os.ReadFile(path)
		b[bytes.Index(b, []byte("six"))] ^= 0x20
		os.WriteFile(path, b, 0o600)
		var logs bytes.Buffer
		st, sv, err := openAndLoad(dir, testIdentity, false, 100, slog.New(slog.NewTextHandler(&logs, nil)))
		if !strings.Contains(logs.String(), "level=ERROR") {
			t.Errorf("compacted=%v: no error-level log of the broken snapshot:\n%s", compacted, logs.String())
		}
		if compacted {
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("compacted: load = %v; want ErrCorrupt", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		st.close()
		if sv.snap != nil || len(sv.ents) != 9 {
			t.Errorf("a broken snapshot over a whole log: snapshot %v, %d entries; want none and 9", sv.snap.GetMetadata(), len(sv.ents))
		}
	}
}

// A directory in use by another process (another node started with the
// same directory) is refused as such, not taken for a corrupt one and
// moved aside under the node using it.
func TestStoreRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTest(t, dir)
	defer s.close()
	st, _, err := openLoad(dir)
	if err == nil {
		st.close()
	}
	if err == nil || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("second open = %v; want an in-use error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, walDirName)); err != nil {
		t.Errorf("the log of the node using the directory: %v", err)
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
		_, _, err := openDisk(dir, other, false, slog.New(slog.DiscardHandler))
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
	if err := s.saveSnapshot(testSnap(6, 1, id, "s"), 4); err != nil {
		t.Fatal(err)
	}
	sv, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	if sv.hs.GetCommit() != 6 || sv.hs.GetTerm() != 1 || sv.hs.GetVote() != id || sv.snap.GetMetadata().GetIndex() != 6 {
		t.Errorf("hard state after the snapshot: %v, snapshot %v; want commit 6, term and vote kept", sv.hs, sv.snap.GetMetadata())
	}
}

// Compaction removes the segments the log no longer needs and all but
// the newest snapshots; what is left loads whole.
func TestStoreCompactionRemovesOldSegments(t *testing.T) {
	defer func(size int64) { wal.SegmentSizeBytes = size }(wal.SegmentSizeBytes)
	wal.SegmentSizeBytes = 2048
	dir := t.TempDir()
	s, id := openTest(t, dir)
	for i := uint64(1); i <= 400; i += 10 {
		if err := s.save(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(i + 9)}, entries(i, i+9, 1), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(filesWithSuffix(filepath.Join(dir, walDirName), ".wal"))
	for _, at := range []uint64{100, 200, 300, 350} {
		if err := s.saveSnapshot(testSnap(at, 1, id, "s"), at-20); err != nil {
			t.Fatal(err)
		}
	}
	after := len(filesWithSuffix(filepath.Join(dir, walDirName), ".wal"))
	if before < 5 || after >= before/2 {
		t.Errorf("%d segments before compaction, %d after", before, after)
	}
	if snaps := filesWithSuffix(filepath.Join(dir, snapDirName), ".snap"); len(snaps) != keepSnaps {
		t.Errorf("snapshot files %v; want the newest %d", snaps, keepSnaps)
	}
	s.close()
	st, sv, err := openLoad(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if diff := cmp.Diff(entries(351, 400, 1), sv.ents, protocmp.Transform()); diff != "" || sv.snap.GetMetadata().GetIndex() != 350 {
		t.Errorf("after compaction: snapshot %v, entries (-want +got):\n%s", sv.snap.GetMetadata(), diff)
	}
}
