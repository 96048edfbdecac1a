package replica

import (
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Reads that arrive together are one ReadIndex round: the leader confirms
// its leadership with one heartbeat to each follower for all of them, not
// one per read, and each read gets an index no older than the last write
// committed before it.
func TestReadsShareOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := leaderOf(groups)
		g := groups[lead]
		for i := range 5 {
			write(g, i+1)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		committed := g.Status().Commit
		var rounds atomic.Int64
		n.setDrop(func(from, to string, m *pb.Message) bool {
			if from == lead && m.GetType() == pb.MessageType_MsgHeartbeat && len(m.GetContext()) > 0 {
				rounds.Add(1)
			}
			return false
		})
		const reads = 100
		g.raftMu.Lock() // they all arrive while raft is busy
		type result struct {
			index uint64
			err   error
		}
		results := make(chan result, reads)
		for range reads {
			go func() {
				idx, err := g.ReadIndex(t.Context())
				results <- result{idx, err}
			}()
		}
		for i := 0; i < 100000; i++ { // until every read has joined the round
			g.mu.Lock()
			joined := 0
			if g.readNext != nil {
				joined = g.readNext.joined
			}
			g.mu.Unlock()
			if joined == reads {
				break
			}
			runtime.Gosched()
		}
		g.raftMu.Unlock()
		g.kick()
		for range reads {
			r := <-results
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.index < committed {
				t.Errorf("read index %d; a write was committed at %d before the read", r.index, committed)
			}
		}
		// One heartbeat with the round's context to each of the two
		// followers; one per read without the batching.
		if got := rounds.Load(); got != 2 {
			t.Errorf("%d reads together: the leader sent %d heartbeats with a read's context, want 2", reads, got)
		}
	})
}
