package replica

import (
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"

	pb "go.etcd.io/raft/v3/raftpb"
)

// applyItem is what one Ready hands the apply goroutine: a snapshot to
// install first, then committed entries, with the configuration each
// configuration change made.
type applyItem struct {
	snap     *pb.Snapshot
	restored bool          // the snapshot is this node's own, from disk
	decoded  *snapshotData // snap's data, if it was decoded already
	entries  []*pb.Entry
	confs    []confAt
}

type confAt struct {
	index uint64
	cs    *pb.ConfState
}

func (g *Group) enqueue(item applyItem) {
	g.qmu.Lock()
	g.queue = append(g.queue, item)
	g.qmu.Unlock()
	select {
	case g.qwake <- struct{}{}:
	default:
	}
}

// applyLoop applies committed entries in log order, one at a time, on its
// own goroutine, so that a slow handler holds up neither heartbeats nor
// elections. Once an entry cannot be applied it applies nothing more: a
// replica never skips a write.
func (g *Group) applyLoop() {
	defer g.wg.Done()
	for {
		g.qmu.Lock()
		items := g.queue
		g.queue, g.queueSpare = g.queueSpare[:0], nil
		g.qmu.Unlock()
		if len(items) == 0 {
			select {
			case <-g.stopc:
				return
			case <-g.qwake:
			}
			continue
		}
		for i := range items {
			g.applyItem(&items[i])
		}
		clear(items) // the entries are raft's: not kept alive by the spare
		g.qmu.Lock()
		g.queueSpare = items[:0]
		g.qmu.Unlock()
		g.maybeSnapshot()
	}
}

func (g *Group) stopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopErr != nil
}

func (g *Group) applyItem(item *applyItem) {
	if g.stopped() {
		return
	}
	if item.snap != nil {
		if err := g.install(item); err != nil {
			g.stop(item.snap.GetMetadata().GetIndex(), err)
			return
		}
	}
	confs := item.confs
	for _, e := range item.entries {
		index := e.GetIndex()
		if index <= g.applied.Load() {
			continue // covered by the snapshot just installed
		}
		if len(confs) > 0 && confs[0].index == index {
			g.applyConf = confs[0].cs
			confs = confs[1:]
			// raft sends a new member the newest snapshot, which it
			// refuses unless its configuration names it: snapshot now.
			g.confSnap = true
		}
		if e.GetType() == pb.EntryType_EntryNormal && len(e.GetData()) > 0 {
			if err := g.applyWrite(index, e.GetData()); err != nil {
				g.stop(index, err)
				return
			}
		}
		g.setApplied(index)
	}
}

// applyWrite applies one write: the recorded result if its operation ID
// ran before, the handler's otherwise.
func (g *Group) applyWrite(index uint64, data []byte) error {
	var cmd Command
	if err := cmd.Unmarshal(data); err != nil {
		return fmt.Errorf("the write does not decode: %w", err)
	}
	g.wmu.Lock()
	rec, dup := g.written.get(cmd.OpID)
	g.wmu.Unlock()
	if dup {
		_, err := g.cfg.Host.Apply(index, &cmd, &rec.result)
		return err
	}
	res, err := g.cfg.Host.Apply(index, &cmd, nil)
	if err != nil {
		return err
	}
	g.wmu.Lock()
	g.written.put(cmd.OpID, index, res)
	g.wmu.Unlock()
	return nil
}

func (g *Group) setApplied(index uint64) {
	g.applied.Store(index)
	g.mu.Lock()
	g.appliedMovedLocked()
	g.mu.Unlock()
}

// appliedMovedLocked wakes those who wait for the applied index. Called
// with mu held.
func (g *Group) appliedMovedLocked() {
	if g.appliedCh != nil {
		close(g.appliedCh)
		g.appliedCh = nil
	}
}

// stop ends applying at index: the node reports why until it restarts.
func (g *Group) stop(index uint64, err error) {
	if errors.Is(err, ErrStopped) {
		err = fmt.Errorf("write %d was not applied: %w", index, err)
	} else {
		err = fmt.Errorf("write %d cannot be applied here: %w", index, err)
		g.log.Error("ffgen: replica stopped applying; it serves nothing of the service until it restarts", "index", index, "err", err)
	}
	g.mu.Lock()
	g.stopErr = err
	g.appliedMovedLocked()
	g.setServingLocked(false)
	g.mu.Unlock()
}

// install replaces the state with a snapshot's.
func (g *Group) install(item *applyItem) error {
	snap, d := item.snap, item.decoded
	md := snap.GetMetadata()
	if d == nil {
		var err error
		if d, err = unmarshalSnapshot(snap.GetData(), g.cfg.RememberWrites); err != nil {
			return err
		}
	}
	if d.service != g.cfg.Service {
		return fmt.Errorf("the snapshot at %d is of service %q", md.GetIndex(), d.service)
	}
	if d.state == nil {
		return errors.New("the snapshot carries no state of the service")
	}
	if err := g.cfg.Host.RestoreState(d.state); err != nil {
		return fmt.Errorf("restore the snapshot at %d: %w", md.GetIndex(), err)
	}
	g.wmu.Lock()
	g.written = d.written
	g.wmu.Unlock()
	g.mu.Lock()
	for id, name := range d.names {
		if _, ok := g.names[id]; !ok {
			g.names[id] = name
		}
	}
	for id := range d.removed {
		g.removed[id] = true
	}
	if !item.restored {
		g.st.SnapshotsInstalled++
	}
	g.st.SnapshotIndex = md.GetIndex()
	g.mu.Unlock()
	g.applyConf = md.GetConfState()
	g.lastSnap = md.GetIndex()
	g.nextSnap = g.lastSnap + snapshotInterval(g.cfg.SnapshotEvery)
	g.setApplied(md.GetIndex())
	g.log.Info("ffgen: installed a snapshot", "index", md.GetIndex(), "bytes", len(snap.GetData()))
	return nil
}

// snapshotInterval varies every by up to an eighth either way: replicas
// apply the same writes at about the same time, and a snapshot pauses
// apply; they should not all pause at once.
func snapshotInterval(every uint64) uint64 {
	spread := every / 8
	if spread == 0 {
		return every
	}
	return every - spread + mrand.Uint64N(2*spread+1)
}

// maybeSnapshot takes a snapshot about every SnapshotEvery entries and
// drops the log before it, but for KeepEntries.
func (g *Group) maybeSnapshot() {
	applied := g.applied.Load()
	due := applied >= g.nextSnap || (g.confSnap && applied > g.lastSnap)
	if g.cfg.SnapshotEvery == 0 || !due || g.stopped() {
		return
	}
	// One at a time: while one is stored, the snapshot due waits, and the
	// first apply after the store ends takes it (applied stays past
	// nextSnap). Taken before this check, a snapshot was taken and
	// dropped on every apply while a large one was written out: the
	// service's state and the table of remembered writes, each time.
	if g.disk != nil && !g.snapStoring.CompareAndSwap(false, true) {
		return
	}
	handedOff := false
	defer func() {
		if g.disk != nil && !handedOff {
			g.snapStoring.Store(false)
		}
	}()
	g.lastSnap, g.confSnap = applied, false
	g.nextSnap = applied + snapshotInterval(g.cfg.SnapshotEvery)
	state, ok, err := g.cfg.Host.SnapshotState()
	if !ok {
		return
	}
	if err != nil {
		g.log.Error("ffgen: the service could not take a snapshot; the log grows until it can", "index", applied, "err", err)
		return
	}
	g.mu.Lock()
	names := maps.Clone(g.names)
	removed := maps.Clone(g.removed)
	g.mu.Unlock()
	// Without wmu: this goroutine is the only one that changes written,
	// and the server looks a write up in it (Recorded) with its own lock
	// held, so a marshal under wmu held up every arriving write, and with
	// the server's lock every heartbeat, for as long as it took (100-350
	// ms under load, longer than a heartbeat timeout).
	data := (&snapshotData{service: g.cfg.Service, written: g.written, names: names, removed: removed, state: state}).marshal()
	var compact uint64
	if applied > g.cfg.KeepEntries {
		compact = applied - g.cfg.KeepEntries
	}
	conf := g.applyConf
	if g.disk == nil {
		g.keepSnapshot(applied, conf, data, compact)
		return
	}
	// Storing a large snapshot takes a while; apply goes on meanwhile
	// (the state was taken at applied, between two writes), so that a
	// snapshot never holds a replica behind the commit index.
	handedOff = true
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer g.snapStoring.Store(false)
		g.keepSnapshot(applied, conf, data, compact)
	}()
}

// keepSnapshot stores a snapshot taken at applied, on disk first (should
// that fail, raft's storage keeps the log the store still has), then in
// raft's storage, and drops the log up to compact.
func (g *Group) keepSnapshot(applied uint64, conf *pb.ConfState, data []byte, compact uint64) {
	if g.disk != nil {
		term, err := g.storage.Term(applied)
		if err != nil {
			return // a newer snapshot came from the leader meanwhile
		}
		snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: &applied, Term: &term, ConfState: conf}}
		if err := g.disk.saveSnapshot(snap, compact); err != nil {
			g.log.Error("ffgen: could not store a snapshot; the log on disk grows until a snapshot can be stored", "index", applied, "err", err)
			return
		}
	}
	if _, err := g.storage.CreateSnapshot(applied, conf, data); err != nil {
		return // a newer snapshot came from the leader meanwhile
	}
	if compact > 0 {
		g.storage.Compact(compact)
	}
	g.mu.Lock()
	g.st.SnapshotIndex = applied
	g.mu.Unlock()
}
