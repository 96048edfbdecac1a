package replica

import (
	"context"
	"errors"
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

// A node has one round in flight: reads that arrive while it is
// unanswered share the next, which is sent when it is answered or, as
// here where raft lost the answer, once it has gone unanswered for
// readRetryTicks. A round per read would make a busy follower's reads
// cost the leader a heartbeat to every follower each.
func TestReadsWaitForTheRoundInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, groups := startGroups(t, "a", "b", "c")
		lead := leaderOf(groups)
		follower := followerOf(groups)
		g := groups[follower]
		for i := range 5 {
			write(groups[lead], i+1)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		committed := groups[lead].Status().Commit
		n.sentTo(lead, pb.MessageType_MsgReadIndex)
		var lose atomic.Bool
		lose.Store(true)
		n.setDrop(func(from, to string, m *pb.Message) bool {
			return lose.Load() && to == follower && m.GetType() == pb.MessageType_MsgReadIndexResp
		})
		const reads = 10
		type result struct {
			index uint64
			err   error
		}
		results := make(chan result, reads)
		read := func() {
			idx, err := g.ReadIndex(t.Context())
			results <- result{idx, err}
		}
		go read()
		synctest.Wait() // the first round is sent; its answer is lost
		if got := n.sentTo(lead, pb.MessageType_MsgReadIndex); got != 1 {
			t.Fatalf("one read: the follower sent %d ReadIndex requests, want 1", got)
		}
		for range reads - 1 {
			go read()
			synctest.Wait()
		}
		if got := n.sentTo(lead, pb.MessageType_MsgReadIndex); got != 0 {
			t.Errorf("%d reads that arrived while a round was in flight: the follower sent %d more requests at once, want 0", reads-1, got)
		}
		lose.Store(false)
		time.Sleep(time.Duration(readRetryTicks+1) * 10 * time.Millisecond)
		synctest.Wait()
		for range reads {
			select {
			case r := <-results:
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.index < committed {
					t.Errorf("read index %d; a write was committed at %d before the read", r.index, committed)
				}
			default:
				t.Fatalf("a read still waits %d ticks after its round's answer was lost", readRetryTicks+1)
			}
		}
		if got := n.sentTo(lead, pb.MessageType_MsgReadIndex); got != 1 {
			t.Errorf("the reads that waited were sent as %d requests, want 1", got)
		}
	})
}

// A read that asks once the group has stopped gets ErrStopped at once: the
// rounds waiting when it stopped were ended, and nobody would answer a new
// one (a read held on a node that closed waited for its deadline, which
// froze the fault schedules' clock at their end: TestReplicationRandomFaults
// in runtime/, seed 279465379121393).
func TestReadAfterStopEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, groups := startGroups(t, "a", "b", "c")
		f := groups[followerOf(groups)]
		f.Stop()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := f.ReadIndex(ctx); !errors.Is(err, ErrStopped) {
			t.Fatalf("ReadIndex on a stopped group: %v, want ErrStopped", err)
		}
	})
}
