package replica

import (
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
)

// A write takes raft two rounds to each follower: the append that carries
// it, which each follower answers, and, once a quorum has it, an append
// that carries nothing but the new commit index, so that the followers
// apply it. raft answers that second append too, and the answer tells the
// leader nothing it did not know: the follower has the entries up to the
// append's index, which it said when it took them. Three followers' idle
// answers were a quarter of a write's messages, each a system call to send
// and one to read, and a step of the leader's raft.
//
// So a follower leaves unanswered an append that carried no entries, that
// its log matched, and that raised its commit index. Leaving a message
// unsent is what raft is built to survive (any message may be lost), so
// safety does not rest on it; liveness does not either: the appends raft
// sends to find out where a follower is (after a heartbeat answer, when the
// leader still counts the follower behind) raise no commit index, and are
// answered.

// noticeAnswer is the answer owed for a commit notice: to whom, in which
// term, at which index.
type noticeAnswer struct {
	to, term, index uint64
}

// noteCommitNotice records, before m is stepped, that raft's answer to it
// is not to be sent, if m is a commit notice from the leader. Called with
// raftMu held.
func (g *Group) noteCommitNotice(m *pb.Message) {
	if m.GetType() != pb.MessageType_MsgApp || len(m.GetEntries()) > 0 || g.leading ||
		!g.commitKnown || m.GetFrom() != g.lead {
		return
	}
	// raft commits up to the append's index at most: what the follower
	// has of the leader's log.
	commit := min(m.GetCommit(), m.GetIndex())
	if commit <= g.commit {
		return
	}
	g.unanswered = append(g.unanswered, noticeAnswer{to: m.GetFrom(), term: m.GetTerm(), index: m.GetIndex()})
	// For the next message of the batch: an append after this one that
	// repeats the commit raises nothing, and is answered. If raft did not
	// take this one, the next Ready's hard state (or none) leaves commit
	// no lower than raft's, which only ever means an answer sent.
	g.commit = commit
}

// withoutNoticeAnswers drops from msgs the answers noteCommitNotice
// recorded, and forgets them: an answer raft did not produce (the append
// was rejected, or answered with another index) is sent. Called with
// raftMu held.
func (g *Group) withoutNoticeAnswers(msgs []*pb.Message) []*pb.Message {
	if len(g.unanswered) == 0 {
		return msgs
	}
	out := msgs[:0:0]
	for _, m := range msgs {
		if !g.owedNotice(m) {
			out = append(out, m)
		}
	}
	g.unanswered = g.unanswered[:0]
	return out
}

// owedNotice reports whether m is an answer to a commit notice, and if so
// strikes the notice off: one answer is dropped per notice. When the
// append that brought the entries and the notice of their commit come in
// one batch, raft answers both with the same message, and the leader
// waits for one of them.
func (g *Group) owedNotice(m *pb.Message) bool {
	if m.GetType() != pb.MessageType_MsgAppResp || m.GetReject() {
		return false
	}
	for i, a := range g.unanswered {
		if a.to == m.GetTo() && a.term == m.GetTerm() && a.index == m.GetIndex() {
			g.unanswered = slices.Delete(g.unanswered, i, i+1)
			return true
		}
	}
	return false
}
