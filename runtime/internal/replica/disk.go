package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The group's raft state on disk: one bbolt file per service
// (<dir>/raft.db), as etcd keeps its own state in bbolt. bbolt commits a
// transaction atomically (copy-on-write pages, two checksummed meta pages):
// a crash mid-commit leaves the previous transaction, so there is no torn
// tail to repair. It does not checksum its data pages, so every record
// carries a CRC-32C of its own, checked whenever it is read: flipped bytes
// are found, never trusted.
//
// What one Ready hands over (hard state, entries, a snapshot from the
// leader) is one transaction, one bbolt commit (two fdatasyncs: the pages,
// then the meta page that makes them current): writes that arrive together
// are made durable together (group commit).
//
// The layout:
//
//	meta/identity   the cluster, node and service the directory belongs to, and the node's raft ID
//	meta/hardstate  raft's term, vote and commit
//	snap/snapshot   the newest snapshot, its metadata and data
//	log/<index>     the entries after the snapshot (8-byte big-endian keys)
//
// The snapshot has a bucket of its own: bbolt rewrites a changed bucket's
// page whole, and the hard state, which changes with every Ready, must not
// share a page with megabytes of snapshot.

// fileName is the file in a service's directory.
const fileName = "raft.db"

var (
	bucketMeta = []byte("meta")
	bucketSnap = []byte("snap")
	bucketLog  = []byte("log")
	keyIdent   = []byte("identity")
	keyHard    = []byte("hardstate")
	keySnap    = []byte("snapshot")
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

// boltStore is the store on bbolt.
type boltStore struct {
	db   *bolt.DB
	path string
}

// openDisk opens (creating it if need be) the store in dir for identity.
// A new store gets a new raft ID; an existing one must be identity's.
// noSync skips the fsync of each commit.
func openDisk(dir string, identity Identity, noSync bool) (*boltStore, uint64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, fileName)
	db, err := openBolt(path, noSync)
	if err != nil {
		return nil, 0, err
	}
	s := &boltStore{db: db, path: path}
	id, err := s.identify(identity)
	if err != nil {
		db.Close()
		return nil, 0, err
	}
	return s, id, nil
}

func openBolt(path string, noSync bool) (db *bolt.DB, err error) {
	// bbolt panics on some damaged pages rather than returning an error,
	// and a file cut short faults when a page past its end is read:
	// both become ErrCorrupt. Opening walks every page in use (the free
	// list is rebuilt, not stored), so a damaged file is found here.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %w: %v", path, ErrCorrupt, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		// Another process with the file open is another node using the
		// same directory.
		Timeout:        time.Second,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		NoSync:         noSync,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%s: in use by another process: %w", path, err)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("data file %s: %w", path, err)
		}
		// bbolt found both meta pages damaged, or a file that is not
		// its own.
		return nil, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, err)
	}
	return db, nil
}

// identify checks the store's identity, or writes it (with a new raft ID)
// into a new store.
func (s *boltStore) identify(want Identity) (uint64, error) {
	var id uint64
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		for _, b := range [][]byte{bucketLog, bucketSnap} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if b := meta.Get(keyIdent); b != nil {
			data, err := unseal(b)
			if err != nil {
				return fmt.Errorf("%s: identity: %w", s.path, err)
			}
			have, hid, err := unmarshalIdentity(data)
			if err != nil {
				return fmt.Errorf("%s: identity: %w: %v", s.path, ErrCorrupt, err)
			}
			if have != want {
				return fmt.Errorf("%s: %w: it is of %s, this is %s", s.path, ErrForeignDir, have, want)
			}
			id = hid
			return nil
		}
		id = newID(want.Node)
		return meta.Put(keyIdent, seal(marshalIdentity(want, id)))
	})
	return id, err
}

func (s *boltStore) load() (out *saved, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("%s: %w: %v", s.path, ErrCorrupt, p)
		}
	}()
	out = &saved{hs: &pb.HardState{}}
	err = s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		ident, err := unseal(meta.Get(keyIdent))
		if err != nil {
			return fmt.Errorf("identity: %w", err)
		}
		_, id, err := unmarshalIdentity(ident)
		if err != nil {
			return err
		}
		out.id = id
		if b := meta.Get(keyHard); b != nil {
			if err := unsealInto(b, out.hs); err != nil {
				return fmt.Errorf("hard state: %w", err)
			}
		}
		next := uint64(1)
		if b := tx.Bucket(bucketSnap).Get(keySnap); b != nil {
			out.snap = &pb.Snapshot{}
			if err := unsealInto(b, out.snap); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			next = out.snap.GetMetadata().GetIndex() + 1
		}
		c := tx.Bucket(bucketLog).Cursor()
		for k, v := c.Seek(indexKey(next)); k != nil; k, v = c.Next() {
			e := &pb.Entry{}
			if err := unsealInto(v, e); err != nil {
				return fmt.Errorf("entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
			if e.GetIndex() != next || binary.BigEndian.Uint64(k) != next {
				return fmt.Errorf("%w: entry %d where %d belongs", ErrCorrupt, e.GetIndex(), next)
			}
			out.ents = append(out.ents, e)
			next++
		}
		last := next - 1
		if c := out.hs.GetCommit(); c > last {
			return fmt.Errorf("%w: commit %d is past the last entry %d", ErrCorrupt, c, last)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	if out.snap == nil && len(out.ents) == 0 && out.hs.GetTerm() == 0 {
		return &saved{id: out.id}, nil
	}
	return out, nil
}

func (s *boltStore) save(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		meta, log := tx.Bucket(bucketMeta), tx.Bucket(bucketLog)
		if snap != nil {
			if err := putSnapshot(tx.Bucket(bucketSnap), snap); err != nil {
				return err
			}
			// raft replaces the whole log with a snapshot from the leader.
			if err := tx.DeleteBucket(bucketLog); err != nil {
				return err
			}
			var err error
			if log, err = tx.CreateBucket(bucketLog); err != nil {
				return err
			}
		}
		if len(ents) > 0 {
			if err := deleteFrom(log, ents[0].GetIndex()); err != nil {
				return err
			}
			for _, e := range ents {
				b, err := proto.Marshal(e)
				if err != nil {
					return err
				}
				if err := log.Put(indexKey(e.GetIndex()), seal(b)); err != nil {
					return err
				}
			}
		}
		if hs != nil {
			b, err := proto.Marshal(hs)
			if err != nil {
				return err
			}
			if err := meta.Put(keyHard, seal(b)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) saveSnapshot(snap *pb.Snapshot, compact uint64) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(bucketSnap)
		if b := bucket.Get(keySnap); b != nil {
			var old pb.Snapshot
			if err := unsealInto(b, &old); err == nil && old.GetMetadata().GetIndex() >= snap.GetMetadata().GetIndex() {
				compact = 0
				return nil // the leader's newer snapshot came first
			}
		}
		if err := putSnapshot(bucket, snap); err != nil {
			return err
		}
		// The commit index is stored only with entries or a vote
		// (handleReady), so it may lag what apply reached; raft restarted
		// from this snapshot needs it at least as high as the snapshot,
		// which only committed writes reach.
		meta := tx.Bucket(bucketMeta)
		hs := &pb.HardState{}
		if b := meta.Get(keyHard); b != nil {
			if err := unsealInto(b, hs); err != nil {
				return err
			}
		}
		if index := snap.GetMetadata().GetIndex(); hs.GetCommit() < index {
			hs.Commit = &index
			b, err := proto.Marshal(hs)
			if err != nil {
				return err
			}
			return meta.Put(keyHard, seal(b))
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The entries the snapshot covers go in small transactions: bbolt has
	// one writer at a time, and the Ready loop's next fsync must not wait
	// for a hundred thousand deletions. Entries left behind by a crash
	// meanwhile are below the snapshot, where load does not look.
	for more := compact > 0; more; {
		err := s.db.Update(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketLog).Cursor()
			more = false
			n := 0
			for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= compact; k, _ = c.First() {
				if n == compactBatch {
					more = true
					return nil
				}
				if err := c.Delete(); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// compactBatch is how many entries one transaction of compaction deletes.
const compactBatch = 2000

func (s *boltStore) close() error { return s.db.Close() }

func putSnapshot(bucket *bolt.Bucket, snap *pb.Snapshot) error {
	b, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	return bucket.Put(keySnap, seal(b))
}

// deleteFrom deletes the entries from index on.
func deleteFrom(log *bolt.Bucket, index uint64) error {
	c := log.Cursor()
	for k, _ := c.Seek(indexKey(index)); k != nil; k, _ = c.Seek(indexKey(index)) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

func indexKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i)
	return k[:]
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal prefixes a record with its CRC-32C.
func seal(b []byte) []byte {
	out := make([]byte, 4, 4+len(b))
	binary.LittleEndian.PutUint32(out, crc32.Checksum(b, castagnoli))
	return append(out, b...)
}

// unseal checks a record's CRC-32C and returns the record. The result
// points into b, which bbolt owns only for the transaction.
func unseal(b []byte) ([]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: a record of %d bytes", ErrCorrupt, len(b))
	}
	if crc32.Checksum(b[4:], castagnoli) != binary.LittleEndian.Uint32(b) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return b[4:], nil
}

// unsealInto checks a record and decodes it into m (proto.Unmarshal
// copies what it keeps).
func unsealInto(b []byte, m proto.Message) error {
	data, err := unseal(b)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return nil
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
