package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/runtime"
)

// A probe shared by callers that read and write through one client (the
// -clients layout) counts the failovers of reads and the unanswered
// attempts of writes apart, whichever caller's operation they belong to.
func TestProbeCountsReadsAndWritesApart(t *testing.T) {
	lv := &live{}
	p := newProbe(lv)
	p.Failover("bank.Accounts", "Balance", runtime.ReasonHeartbeatTimeout)
	p.Failover("bank.Accounts", "Deposit", runtime.ReasonHeartbeatTimeout) // a write's leg: counted by its end
	p.AttemptEnded("bank.Accounts", "Deposit", runtime.ReasonOverloaded, time.Millisecond)
	p.AttemptEnded("bank.Accounts", "Transfer", runtime.ReasonNone, time.Millisecond)
	p.AttemptEnded("bank.Accounts", "Balance", runtime.ReasonOverloaded, time.Millisecond) // a read's: not a write leg
	reads, writes := p.counts()
	if len(reads) != 1 || reads[runtime.ReasonHeartbeatTimeout] != 1 {
		t.Errorf("read failovers = %v, want heartbeat-timeout 1", reads)
	}
	if len(writes) != 2 || writes[runtime.ReasonOverloaded] != 1 || writes[runtime.ReasonNone] != 1 {
		t.Errorf("write attempt ends = %v, want overloaded 1, none 1", writes)
	}
	if n := lv.failovers.Load(); n != 1 {
		t.Errorf("live failovers = %d, want 1", n)
	}
	if fo := p.take(); len(fo) != 1 || fo[0] != runtime.ReasonHeartbeatTimeout {
		t.Errorf("take = %v, want the read's heartbeat-timeout", fo)
	}
}

// The once filter keeps one line per message, node and reason: the
// runtime's suspicions name the node "peer", and a filter that looked
// only at "node" kept the first suspicion of any node for a reason and
// dropped those of every other node.
func TestOnceHandlerKeepsEachPeer(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(newOnceHandler(slog.NewTextHandler(&out, nil)))
	for range 2 {
		for _, peer := range []string{"a2", "b2"} {
			log.Warn("ffgen: node suspected", "peer", peer, "reason", "heartbeat-timeout")
		}
		log.Warn("ffgen: node suspected", "peer", "b2", "reason", "dial-failed")
		log.Warn("member left", "node", "a1")
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		_, msg, _ := strings.Cut(l, "level=WARN ")
		got = append(got, msg)
	}
	want := []string{
		`msg="ffgen: node suspected" peer=a2 reason=heartbeat-timeout`,
		`msg="ffgen: node suspected" peer=b2 reason=heartbeat-timeout`,
		`msg="ffgen: node suspected" peer=b2 reason=dial-failed`,
		`msg="member left" node=a1`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines passed (-want +got):\n%s", diff)
	}
}
