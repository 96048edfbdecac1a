package replica

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	etcdioutil "go.etcd.io/etcd/pkg/v3/ioutil"
	"go.etcd.io/raft/v3"
)

// How a group starts from, and lives with, its state on disk.
//
//   - Restart: the snapshot goes into the service first (RestoreState),
//     raft restarts with the stored hard state and log under the node's
//     stored raft ID, and the committed entries after the snapshot are
//     applied again. The node needs no peer for any of it.
//   - A torn tail (the last record cut short by a crash mid-append) is cut
//     at the last good record as the store opens (disk.go).
//   - A corrupt store (a checksum that does not match, a record that does
//     not decode, a log with a gap, no snapshot the log starts from) is never
//     trusted: it is moved aside, and the node starts empty under a new
//     raft ID. It rejoins as a new member (the leader removes its earlier
//     self) and catches up from its peers. Keeping the same ID with a
//     shorter log could cost a committed write: the node would vote as if
//     it had never acknowledged the entries it lost.
//   - A failed write (a full disk): the node steps down and drives raft no
//     more; every diskRetry it starts raft again from what is stored, and
//     serves again once it can store.
//   - A node the group removed (members.go, outOfGroup) leaves a mark in
//     the directory; at the next start the state is moved aside, as a
//     corrupt one is, and the node joins as a new member.

// diskRetry is how long a node that could not store waits before it tries
// again.
const diskRetry = time.Second

// openStore opens the group's store, setting a corrupt one aside.
func openStore(cfg Config, log *slog.Logger) (store, *saved, error) {
	ident := Identity{Cluster: cfg.Cluster, Node: cfg.Node, Service: cfg.Service}
	if err := finishAside(cfg.Dir, log); err != nil {
		return nil, nil, err
	}
	s, sv, err := openAndLoad(cfg.Dir, ident, cfg.NoSync, cfg.RememberWrites, log)
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return s, sv, err
	}
	aside := asideDir(cfg.Dir, "corrupt")
	if rerr := setAside(cfg.Dir, aside); rerr != nil {
		return nil, nil, fmt.Errorf("%w; and it cannot be set aside: %v", err, rerr)
	}
	log.Error("ffgen: the replicated state on disk is corrupt and is not used: it is kept aside, and the node rejoins the group as a new member, catching up from its peers",
		"err", err, "kept", aside)
	return openAndLoad(cfg.Dir, ident, cfg.NoSync, cfg.RememberWrites, log)
}

// openStoreOfMember opens the group's store as openStore does, setting
// aside the state of a raft ID the group removed (markRemoved): under
// that ID the node is no member, and its old state must not be applied
// under a new member's log.
func openStoreOfMember(cfg Config, log *slog.Logger) (store, *saved, error) {
	s, sv, err := openStore(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	mark := filepath.Join(cfg.Dir, removedMark(sv.id))
	// A mark of another raft ID is an earlier self's, left by a crash
	// between setting its state aside and moving the mark: it says
	// nothing of this one.
	marks, _ := filepath.Glob(filepath.Join(cfg.Dir, removedMarkPrefix+"*"))
	for _, m := range marks {
		if m != mark {
			os.Remove(m)
		}
	}
	if _, err := os.Stat(mark); errors.Is(err, fs.ErrNotExist) {
		return s, sv, nil
	} else if err != nil {
		s.close()
		return nil, nil, fmt.Errorf("data directory %s: %w", cfg.Dir, err)
	}
	s.close()
	aside := asideDir(cfg.Dir, "removed")
	if err := setAside(cfg.Dir, aside); err != nil {
		return nil, nil, fmt.Errorf("data directory %s: the group removed this node, and its state cannot be set aside: %w", cfg.Dir, err)
	}
	if err := os.Rename(mark, filepath.Join(aside, filepath.Base(mark))); err != nil {
		return nil, nil, fmt.Errorf("data directory %s: %w", cfg.Dir, err)
	}
	log.Warn("ffgen: the group removed this node while it held this state: it is kept aside, and the node joins the group as a new member, catching up from its peers",
		"removed_id", fmt.Sprintf("%x", sv.id), "kept", aside)
	return openStore(cfg, log)
}

// removedMark is the name of the file that marks raft ID id as removed
// from its group.
func removedMark(id uint64) string { return fmt.Sprintf("%s%016x", removedMarkPrefix, id) }

const removedMarkPrefix = "removed-member-"

// markRemoved leaves the mark of a removed raft ID in dir, durably: its
// presence is all it says.
func markRemoved(dir string, id uint64) error {
	if err := etcdioutil.WriteAndSyncFile(filepath.Join(dir, removedMark(id)), nil, 0o600); err != nil {
		return err
	}
	return syncDir(dir)
}

// asideDir names a directory in dir to keep state that is not used, why
// being the reason.
func asideDir(dir, why string) string {
	return filepath.Join(dir, why+"-"+time.Now().UTC().Format("20060102T150405.000"))
}

// setAside moves the log and the snapshots in dir into aside. It first
// says where, in a file (asidePending) that it removes once both are
// moved: a crash between the two renames left the snapshots without their
// log, which the next start took for a corrupt store, and set aside
// again, blaming corruption. finishAside completes it instead. Called
// without the store open; it holds the directory's lock.
func setAside(dir, aside string) error {
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return err
	}
	if err := etcdioutil.WriteAndSyncFile(filepath.Join(dir, asidePending), []byte(filepath.Base(aside)), 0o600); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return moveAside(dir, aside)
}

// asidePending is the file that names the directory a setting aside under
// way moves the state into.
const asidePending = "aside-pending"

// moveAside moves into aside the log and the snapshots still in dir, and
// then removes asidePending, each step durable before the next.
func moveAside(dir, aside string) error {
	for _, name := range []string{walDirName, snapDirName} {
		err := os.Rename(filepath.Join(dir, name), filepath.Join(aside, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := syncDir(aside); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, asidePending)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(dir)
}

// finishAside completes a setting aside that a crash cut short, holding
// the directory's lock as the store does. A pending file that names no
// directory in dir was cut short itself, before anything moved: it is
// dropped.
func finishAside(dir string, log *slog.Logger) error {
	pending := filepath.Join(dir, asidePending)
	b, err := os.ReadFile(pending)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	name := string(b)
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		if err := os.Remove(pending); err != nil {
			return fmt.Errorf("data directory %s: %w", dir, err)
		}
		return syncDir(dir)
	}
	aside := filepath.Join(dir, name)
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := moveAside(dir, aside); err != nil {
		return fmt.Errorf("data directory %s: finishing setting the state aside into %s: %w", dir, aside, err)
	}
	log.Warn("ffgen: a crash had cut short setting the replicated state aside: it is finished, and the node starts as a new member", "kept", aside)
	return nil
}

func openAndLoad(dir string, ident Identity, noSync bool, remember int, log *slog.Logger) (store, *saved, error) {
	s, _, err := openDisk(dir, ident, noSync, log)
	if err != nil {
		return nil, nil, err
	}
	sv, err := s.load()
	if err == nil && sv.snap != nil {
		// A snapshot whose checksum holds but whose data does not decode
		// is as corrupt as one whose checksum does not.
		var derr error
		if sv.data, derr = unmarshalSnapshot(sv.snap.GetData(), remember); derr != nil {
			err = fmt.Errorf("%s: snapshot at %d: %w: %v", dir, sv.snap.GetMetadata().GetIndex(), ErrCorrupt, derr)
		}
	}
	if err != nil {
		s.close()
		return nil, nil, err
	}
	return s, sv, nil
}

// restore puts what was stored into raft's storage, and the snapshot into
// the apply goroutine's queue, returning the index the service will have
// applied once it is restored.
func (g *Group) restore(sv *saved) uint64 {
	if sv == nil || (sv.snap == nil && len(sv.ents) == 0) {
		return 0
	}
	var applied uint64
	if sv.snap != nil {
		md := sv.snap.GetMetadata()
		g.storage.ApplySnapshot(sv.snap)
		g.conf = md.GetConfState()
		for id, name := range sv.data.names {
			if _, ok := g.names[id]; !ok {
				g.names[id] = name
			}
		}
		applied = md.GetIndex()
		g.enqueue(applyItem{snap: sv.snap, decoded: sv.data, restored: true})
		g.updateMembers()
	}
	if sv.hs != nil {
		g.storage.SetHardState(sv.hs)
	}
	g.storage.Append(sv.ents)
	g.restored = true
	g.handed = applied
	last, _ := g.storage.LastIndex()
	g.log.Info("ffgen: restarting the replicated service from disk", "dir", g.cfg.Dir,
		"snapshot", applied, "commit", sv.hs.GetCommit(), "last", last)
	return applied
}

// diskFailed stops driving raft after a failed write: what raft handed
// over is not stored, so raft must not be told it is. Called with raftMu
// held.
func (g *Group) diskFailed(err error) {
	g.diskErr, g.diskFailedAt = fmt.Errorf("cannot store the replicated state: %w", err), time.Now()
	// Said once at error level; the retries every diskRetry while the
	// disk stays full are debug lines.
	level := slog.LevelError
	if g.diskFailing {
		level = slog.LevelDebug
	}
	g.diskFailing = true
	g.log.Log(context.Background(), level, "ffgen: could not store the replicated state; the node steps down and serves nothing of the service until it can", "dir", g.cfg.Dir, "err", err)
	g.forgetLeader(func(st *Status) { st.StoreFailed = g.diskErr.Error() })
}

// retryDisk starts raft again from what is stored, once diskRetry has
// passed since the failure. raft's storage holds exactly the entries and
// snapshot the store holds (handleReady adds them only once stored; its
// commit index may be newer, which raft may know). raft starts from
// the snapshot's configuration and hands over the committed entries after
// it again, whose configuration changes bring its configuration up to
// date; apply has those up to handed, and does not get them twice.
// Called with raftMu held.
func (g *Group) retryDisk() {
	if g.diskErr == nil || time.Since(g.diskFailedAt) < diskRetry {
		return
	}
	snap, err := g.storage.Snapshot()
	if err != nil {
		g.diskFailedAt = time.Now()
		return
	}
	g.conf = snap.GetMetadata().GetConfState()
	rn, err := raft.NewRawNode(g.raftConfig(snap.GetMetadata().GetIndex()))
	if err != nil {
		g.diskFailedAt = time.Now()
		g.log.Error("ffgen: could not restart raft from the stored state", "err", err)
		return
	}
	g.rn = rn
	g.diskErr = nil
	g.mu.Lock()
	g.st.StoreFailed = ""
	g.mu.Unlock()
	g.log.Debug("ffgen: trying to store the replicated state again")
	g.handleReady()
}

// dropInbox empties the inbox while raft is not driven: peers send again,
// and proposals fail.
func (g *Group) dropInbox() {
	g.inMu.Lock()
	props, ctl := g.inProps, g.inCtl
	g.inMsgs, g.inProps, g.inCtl = nil, nil, nil
	g.inMu.Unlock()
	for _, f := range ctl {
		f()
	}
	why := g.halted().Error()
	for _, p := range props {
		g.emit(func() { g.cfg.Host.Dropped(p.opID, why) })
	}
}
