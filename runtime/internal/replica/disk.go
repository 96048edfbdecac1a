package replica

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The group's raft state on disk is kept as etcd's server keeps its own:
// etcd's write-ahead log (go.etcd.io/etcd/server/v3/storage/wal) in
// <dir>/wal and its snapshot files (etcdserver/api/snap) in <dir>/snap.
//
// Why the WAL and not a bbolt file: what one Ready hands over (hard state,
// entries) is one append and one fdatasync of a preallocated segment,
// where a bbolt commit is two (its pages, then the meta page that makes
// them current). On the write's path that is the follower's store and the
// leader's, so it halves what a replicated write waits for on disk.
// Writes that arrive together are stored together (group commit).
//
// What protects what:
//   - every WAL record carries a rolling CRC-32C: flipped bytes anywhere
//     are found (ErrCorrupt), never trusted; a record cut short at the end
//     of the last segment (a crash mid-append, which was never synced, so
//     never acknowledged) is a torn tail, cut at the last good record
//     (wal.Repair), and the rest comes from peers;
//   - a snapshot file carries a CRC-32 of its own; one that does not
//     check is renamed *.broken by etcd's loader, and an older snapshot
//     the log still reaches is used, or the store is corrupt;
//   - the WAL's metadata, on every segment, is the identity: the cluster,
//     node and service the directory belongs to, and the node's raft ID.
//
// A snapshot from the leader replaces the whole log: it goes into a new
// WAL (<dir>/wal.next) that replaces the old one by rename once the
// snapshot's file is written, so that no entry of the old log can
// reappear after the snapshot at a restart (a WAL read from a snapshot
// record keeps the entries written before the record). A snapshot taken
// here is of the log itself: its file is written, then its record.
// <dir>/lock is held while the store is open.

const (
	walDirName  = "wal"
	snapDirName = "snap"
	lockName    = "lock"
	// keepSnaps is how many snapshot files are kept: the newest, and one
	// to fall back on if it is found broken.
	keepSnaps = 2
)

// Identity is whose a data directory is.
type Identity struct {
	Cluster, Node, Service string
}

func (id Identity) String() string {
	return fmt.Sprintf("cluster %q, node %q, service %q", id.Cluster, id.Node, id.Service)
}

// ErrForeignDir is returned for a data directory of another cluster, node
// or service.
var ErrForeignDir = errors.New("the data directory belongs to another cluster, node or service")

// ErrCorrupt is returned for a record whose checksum does not match, or
// that does not decode.
var ErrCorrupt = errors.New("corrupt raft state")

// store persists a group's raft state. The Ready loop saves; the apply
// goroutine saves snapshots; both may run at once.
type store interface {
	// load returns what was saved, nil for an empty store.
	load() (*saved, error)
	// save makes what one Ready hands over durable: a snapshot from the
	// leader (which replaces the whole log), entries (which replace any
	// from their first index on), and the hard state.
	save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error
	// saveSnapshot keeps a snapshot taken here, unless a newer one is
	// saved already, and drops the entries up to compact.
	saveSnapshot(snap *pb.Snapshot, compact uint64) error
	close() error
}

// saved is a group's raft state as loaded.
type saved struct {
	id   uint64 // the node's raft ID
	hs   *pb.HardState
	snap *pb.Snapshot  // nil if none was taken
	data *snapshotData // snap's data, decoded (openAndLoad)
	ents []*pb.Entry   // after the snapshot, contiguous
}

// walStore is the store on etcd's WAL and snapshot files.
type walStore struct {
	dir     string // the service's data directory
	meta    []byte // the identity, as the WAL's metadata
	noSync  bool
	lg      *zap.Logger
	snapper *snap.Snapshotter
	loaded  *saved
	lock    *fileutil.LockedFile // <dir>/lock, held while open

	// mu guards the following.
	mu     sync.Mutex
	w      *wal.WAL
	hs     *pb.HardState // the last one written
	snapAt uint64        // the newest snapshot's index
	// failed is a failed write's error: the WAL's tail is unknown until
	// it is opened again.
	failed error
	stale  bool // written since loaded was read
}

// openDisk opens (creating it if need be) the store in dir for identity,
// and reads what it holds. A new store gets a new raft ID; an existing one
// must be identity's. noSync skips the fdatasync of each append.
func openDisk(dir string, identity Identity, noSync bool, log *slog.Logger) (*walStore, uint64, error) {
	if err := os.MkdirAll(filepath.Join(dir, snapDirName), 0o700); err != nil {
		return nil, 0, fmt.Errorf("data directory %s: %w", dir, err)
	}
	s := &walStore{dir: dir, noSync: noSync, lg: zapToSlog(log)}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, 0, err
	}
	s.lock = lock
	s.snapper = snap.New(s.lg, filepath.Join(dir, snapDirName))
	if err := s.finishSwap(); err != nil {
		s.close()
		return nil, 0, err
	}
	if !wal.Exist(s.walDir()) {
		w, err := wal.Create(s.lg, s.walDir(), marshalIdentity(identity, newID(identity.Node)))
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			s.close()
			return nil, 0, fmt.Errorf("data directory %s: %w", dir, err)
		}
	}
	if err := s.open(); err != nil {
		s.close()
		return nil, 0, err
	}
	have, id, err := unmarshalIdentity(s.meta)
	if err != nil {
		s.close()
		return nil, 0, fmt.Errorf("%s: identity: %w: %v", s.walDir(), ErrCorrupt, err)
	}
	if have != identity {
		s.close()
		return nil, 0, fmt.Errorf("%s: %w: it is of %s, this is %s", dir, ErrForeignDir, have, identity)
	}
	s.loaded.id = id
	return s, id, nil
}

func (s *walStore) walDir() string { return filepath.Join(s.dir, walDirName) }

// lockDir takes dir's lock. Another process with the directory open is
// another node using the same directory: it must not find this one's
// files moving.
func lockDir(dir string) (*fileutil.LockedFile, error) {
	lock, err := fileutil.TryLockFile(filepath.Join(dir, lockName), os.O_WRONLY|os.O_CREATE, fileutil.PrivateFileMode)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, fmt.Errorf("data directory %s: in use by another process: %w", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	return lock, nil
}

// open opens the WAL at the newest snapshot it can load and reads it to
// its end, leaving it ready to append. Called without other users, or
// with mu held.
func (s *walStore) open() (err error) {
	// etcd's decoders panic on a record whose checksum holds but whose
	// protobuf does not decode: that is a corrupt store too.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %w: %v", s.dir, ErrCorrupt, p)
		}
	}()
	// The newest snapshot file that checks (etcd's loader renames one
	// that does not *.broken, and takes the next older). etcd's server
	// asks the log first which snapshots it names
	// (wal.ValidSnapshotEntries), which reads every segment once more;
	// here the newest file is always one the log can start from: a
	// snapshot taken here is of this log (written before its record, a
	// crash between leaves a file of committed entries the log holds),
	// and one from the leader counts only once its log has replaced the
	// old one (replace, finishSwap).
	start := &walpb.Snapshot{}
	files := filesWithSuffix(filepath.Join(s.dir, snapDirName), ".snap")
	sn, err := s.snapper.Load()
	if broken := len(files) - len(filesWithSuffix(filepath.Join(s.dir, snapDirName), ".snap")); broken > 0 {
		s.lg.Error("snapshot files do not check and are set aside (*.snap.broken): the node starts from an older one if its log reaches it, or catches up from its peers",
			zap.String("dir", filepath.Join(s.dir, snapDirName)), zap.Int("files", broken))
	}
	switch {
	case errors.Is(err, snap.ErrNoSnapshot):
		sn = nil
	case err != nil:
		return fmt.Errorf("data directory %s: %w", s.dir, err)
	default:
		md := sn.GetMetadata()
		start = &walpb.Snapshot{Index: md.Index, Term: md.Term, ConfState: md.ConfState}
	}
	// A log compacted past the snapshot found (the newer ones broken or
	// gone) has no segment to start from: what it held is nowhere here,
	// and readWAL says the store is corrupt.
	w, hs, ents, err := s.readWAL(start)
	if err != nil {
		return err
	}
	out := &saved{hs: hs, snap: sn, ents: ents}
	snapAt := uint64(0)
	if sn != nil {
		snapAt = sn.GetMetadata().GetIndex()
		// A hard state is stored with entries or a vote, so its commit
		// index may lag what a snapshot taken since covers; the snapshot
		// holds only committed writes, and raft needs commit ≥ it.
		if hs.GetCommit() < snapAt {
			hs.Commit = &snapAt
		}
	}
	last := snapAt + uint64(len(ents))
	if len(ents) > 0 && ents[0].GetIndex() != snapAt+1 {
		w.Close()
		return fmt.Errorf("%s: %w: the log starts at %d after a snapshot at %d", s.dir, ErrCorrupt, ents[0].GetIndex(), snapAt)
	}
	if c := hs.GetCommit(); c > last {
		w.Close()
		return fmt.Errorf("%s: %w: commit %d is past the last entry %d", s.dir, ErrCorrupt, c, last)
	}
	if s.noSync {
		w.SetUnsafeNoFsync()
	}
	if sn == nil && len(ents) == 0 && hs.GetTerm() == 0 {
		out = &saved{}
	}
	if s.loaded != nil {
		out.id = s.loaded.id
	}
	s.w, s.hs, s.snapAt, s.loaded, s.failed, s.stale = w, hs, snapAt, out, nil, false
	return nil
}

// readWAL opens the WAL at start and reads it, cutting a torn tail.
func (s *walStore) readWAL(start *walpb.Snapshot) (*wal.WAL, *pb.HardState, []*pb.Entry, error) {
	for repaired := false; ; repaired = true {
		w, err := wal.Open(s.lg, s.walDir(), start)
		if err != nil {
			return nil, nil, nil, s.readErr(err)
		}
		meta, hs, ents, err := w.ReadAll()
		if err == nil {
			s.meta = meta
			return w, hs, ents, nil
		}
		w.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) || repaired {
			return nil, nil, nil, s.readErr(err)
		}
		// The last record was cut short by a crash mid-append. It was
		// never synced, so never acknowledged: cut it (etcd keeps a copy
		// of the segment as *.broken).
		if !wal.Repair(s.lg, s.walDir()) {
			return nil, nil, nil, fmt.Errorf("%s: a torn tail that cannot be cut: %w", s.walDir(), err)
		}
	}
}

// readErr says what reading the WAL found: damage is ErrCorrupt, what
// the OS refused (a permission, a lock held by another process) is not.
func (s *walStore) readErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && !errors.Is(err, fs.ErrNotExist) || errors.Is(err, fileutil.ErrLocked) {
		return fmt.Errorf("data directory %s: %w", s.dir, err)
	}
	return fmt.Errorf("%s: %w: %v", s.walDir(), ErrCorrupt, err)
}

// load returns what the store holds: what open read, or, after writes,
// what reading it again finds.
func (s *walStore) load() (*saved, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stale {
		if s.w != nil {
			s.w.Close()
			s.w = nil
		}
		if err := s.open(); err != nil {
			return nil, err
		}
	}
	return s.loaded, nil
}

func (s *walStore) save(hs *pb.HardState, ents []*pb.Entry, sn *pb.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reopen(); err != nil {
		return err
	}
	s.stale = true
	var err error
	if sn != nil {
		err = s.replace(hs, ents, sn)
	} else {
		err = s.w.Save(hs, ents)
	}
	if err != nil {
		s.failed = err
		return err
	}
	if hs != nil {
		s.hs = hs
	}
	return nil
}

// reopen opens the WAL again after a failed write: its tail may hold part
// of what failed, which must be read (and a torn record cut) before
// anything is appended after it. Called with mu held.
func (s *walStore) reopen() error {
	if s.failed == nil {
		return nil
	}
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
	if err := s.open(); err != nil {
		return fmt.Errorf("%w (after %v)", err, s.failed)
	}
	return nil
}

// replace makes a snapshot from the leader, and what comes with it, the
// whole of the stored state: a new log (<dir>/wal.next) holding the
// snapshot's record, the hard state and the entries, then the snapshot's
// file, then the new log in place of the old by rename. Both the new log
// and the file being there is the commit point (finishSwap). Called with
// mu held.
func (s *walStore) replace(hs *pb.HardState, ents []*pb.Entry, sn *pb.Snapshot) error {
	md := sn.GetMetadata()
	if hs = proto.CloneOf(hs); hs == nil {
		hs = &pb.HardState{}
	}
	if hs.GetCommit() < md.GetIndex() {
		hs.Commit = md.Index
	}
	next := filepath.Join(s.dir, walDirName+".next")
	if err := os.RemoveAll(next); err != nil {
		return err
	}
	w, err := wal.Create(s.lg, next, s.meta)
	if err != nil {
		return err
	}
	if s.noSync {
		w.SetUnsafeNoFsync()
	}
	err = w.SaveSnapshot(&walpb.Snapshot{Index: md.Index, Term: md.Term, ConfState: md.ConfState})
	if err == nil {
		err = w.Save(hs, ents)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.saveSnapFile(sn)
	}
	if err != nil {
		os.RemoveAll(next)
		return err
	}
	if err := s.w.Close(); err != nil {
		return err
	}
	s.w = nil
	s.failed = errors.New("the log is being replaced") // open again below, or by the next save
	if err := s.swap(); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	s.purgeSnaps()
	return nil
}

// swap puts <dir>/wal.next in place of <dir>/wal.
func (s *walStore) swap() error {
	next, old := filepath.Join(s.dir, walDirName+".next"), filepath.Join(s.dir, walDirName+".old")
	if err := os.Rename(s.walDir(), old); err != nil {
		return err
	}
	if err := os.Rename(next, s.walDir()); err != nil {
		return err
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// finishSwap completes or undoes a replacement of the log that a crash
// interrupted (replace): a new log whose snapshot file is there and
// checks is put in place; one without is removed.
func (s *walStore) finishSwap() error {
	next, old := filepath.Join(s.dir, walDirName+".next"), filepath.Join(s.dir, walDirName+".old")
	fail := func(err error) error { return fmt.Errorf("data directory %s: %w", s.dir, err) }
	_, errWAL := os.Stat(s.walDir())
	_, errNext := os.Stat(next)
	switch {
	case errWAL == nil && errNext == nil:
		// Crashed before the renames: the new log counts only with its
		// snapshot's file whole.
		snaps, err := wal.ValidSnapshotEntries(s.lg, next)
		if err == nil && len(snaps) > 0 && snaps[len(snaps)-1].GetIndex() > 0 {
			if _, err := s.snapper.LoadNewestAvailable(snaps[len(snaps)-1:]); err == nil {
				if err := s.swap(); err != nil {
					return fail(err)
				}
				return nil
			}
		}
	case errors.Is(errWAL, fs.ErrNotExist) && errNext == nil:
		// Crashed between the two renames.
		if err := os.Rename(next, s.walDir()); err != nil {
			return fail(err)
		}
	case errors.Is(errWAL, fs.ErrNotExist):
		if _, err := os.Stat(old); err == nil {
			if err := os.Rename(old, s.walDir()); err != nil {
				return fail(err)
			}
		}
	}
	for _, p := range []string{next, old} {
		if err := os.RemoveAll(p); err != nil {
			return fail(err)
		}
	}
	return nil
}

func (s *walStore) saveSnapshot(sn *pb.Snapshot, compact uint64) error {
	md := sn.GetMetadata()
	s.mu.Lock()
	newer := s.snapAt >= md.GetIndex()
	s.mu.Unlock()
	if newer {
		return nil // the leader's newer snapshot came first
	}
	// The file is written outside mu: it may be megabytes, and the Ready
	// loop's next append must not wait for it.
	if err := s.saveSnapFile(sn); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snapAt >= md.GetIndex() {
		return nil
	}
	if err := s.reopen(); err != nil {
		return err
	}
	s.stale = true
	// etcd trusts a snapshot record only once the log's commit index has
	// reached it, and the commit index is stored only with entries or a
	// vote (handleReady): raise it here, which only committed writes
	// reach.
	if s.hs.GetCommit() < md.GetIndex() {
		hs := proto.CloneOf(s.hs)
		hs.Commit = md.Index
		if err := s.w.Save(hs, nil); err != nil {
			s.failed = err
			return err
		}
		s.hs = hs
	}
	if err := s.w.SaveSnapshot(&walpb.Snapshot{Index: md.Index, Term: md.Term, ConfState: md.ConfState}); err != nil {
		s.failed = err
		return err
	}
	s.snapAt = md.GetIndex()
	if compact > 0 {
		if err := s.w.ReleaseLockTo(compact); err != nil {
			return err
		}
		s.purgeSegments()
	}
	s.purgeSnaps()
	return nil
}

// saveSnapFile writes a snapshot's file and makes its name durable too
// (etcd's snapshotter fsyncs the file, not the directory): the log that
// names it, and the segments removed after it, count on it.
func (s *walStore) saveSnapFile(sn *pb.Snapshot) error {
	if err := s.snapper.SaveSnap(sn); err != nil {
		return err
	}
	return syncDir(filepath.Join(s.dir, snapDirName))
}

// purgeSegments removes the WAL segments the log no longer holds a lock
// on (ReleaseLockTo): every entry in them is below the compaction point.
// Called with mu held.
func (s *walStore) purgeSegments() {
	names := filesWithSuffix(s.walDir(), ".wal")
	for _, name := range names[:max(len(names)-1, 0)] {
		p := filepath.Join(s.walDir(), name)
		l, err := fileutil.TryLockFile(p, os.O_WRONLY, fileutil.PrivateFileMode)
		if err != nil {
			return // held: this one and every later one are still in use
		}
		err = os.Remove(p)
		l.Close()
		if err != nil {
			s.lg.Warn("could not remove a WAL segment", zap.String("path", p), zap.Error(err))
			return
		}
	}
}

// purgeSnaps removes all but the newest keepSnaps snapshot files. Called
// with mu held.
func (s *walStore) purgeSnaps() {
	dir := filepath.Join(s.dir, snapDirName)
	names := filesWithSuffix(dir, ".snap")
	for _, name := range names[:max(len(names)-keepSnaps, 0)] {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			s.lg.Warn("could not remove a snapshot file", zap.String("path", name), zap.Error(err))
		}
	}
}

// filesWithSuffix lists dir's files named ...suffix, sorted: etcd names
// segments and snapshots so that the order of names is their order.
func filesWithSuffix(dir, suffix string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func syncDir(dir string) error {
	d, err := fileutil.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return fileutil.Fsync(d)
}

func (s *walStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.w != nil {
		err = s.w.Close()
		s.w = nil
	}
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
	return err
}

const (
	identCluster = 1
	identNode    = 2
	identService = 3
	identID      = 4
)

func marshalIdentity(id Identity, raftID uint64) []byte {
	var b []byte
	b = appendString(b, identCluster, id.Cluster)
	b = appendString(b, identNode, id.Node)
	b = appendString(b, identService, id.Service)
	b = protowire.AppendTag(b, identID, protowire.VarintType)
	return protowire.AppendVarint(b, raftID)
}

func unmarshalIdentity(b []byte) (Identity, uint64, error) {
	var id Identity
	var raftID uint64
	if b == nil {
		return id, 0, fmt.Errorf("%w: no identity", ErrCorrupt)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return id, 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == identID && typ == protowire.VarintType:
			raftID, n = protowire.ConsumeVarint(b)
		case (num == identCluster || num == identNode || num == identService) && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			switch num {
			case identCluster:
				id.Cluster = string(v)
			case identNode:
				id.Node = string(v)
			default:
				id.Service = string(v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return id, 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	if raftID == 0 {
		return id, 0, fmt.Errorf("%w: no raft ID", ErrCorrupt)
	}
	return id, raftID, nil
}
