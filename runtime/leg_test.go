package runtime

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/runtime/internal/memnet"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The server's "handler stopped" answer and the client's attempt timer fire
// at the same instant; on a busy machine the answer can be read first. It
// must end the attempt as the timer would have: an attempt timeout, not a
// failover error. Over the network the timer nearly always wins, so the
// answer is put in front of it here.
func TestStoppedAnswerAtTheAttemptEndIsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := DefaultSettings()
		s.Groups = []string{"a", "b"}
		c, err := NewClient(ClientConfig{
			Transport:  memnet.NewNetwork().Transport(transport.Config{Node: "client"}),
			Membership: NewStaticMembership(),
			Settings:   s,
			Logger:     slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		m := &MethodDesc{Service: "svc", Name: "M"}
		op := &operation{c: c, m: m, s: s, start: time.Now(), deadline: time.Now().Add(s.OperationTimeout)}
		const timeout = time.Second
		time.Sleep(timeout) // the attempt's time is up
		p := &sent{start: op.start, out: outcome{member: Member{Name: "n1", Group: "a"}}, a: transport.Attempt{
			Call: 1, Timeout: timeout, Flags: transport.FlagScatter, // no cancel to send on the missing connection
		}}
		p.l.done = make(chan legEvent, 1)
		p.l.done <- legEvent{result: &transport.Result{Status: transport.StatusFailover, Code: codeTimeout, Message: "handler stopped: context deadline exceeded"}}
		o := op.await(context.Background(), p)
		if o.reason != ReasonAttemptTimeout || !c.Suspected("n1") {
			t.Errorf("reason %s, suspected %v; want attempt-timeout and n1 suspected", o.reason, c.Suspected("n1"))
		}

		// Before the attempt's end the same answer is the server's word: a
		// failover error (a shutdown, say).
		op.start = time.Now()
		p.start = op.start
		p.l.done <- legEvent{result: &transport.Result{Status: transport.StatusFailover, Code: codeTimeout, Message: "handler stopped: server shutting down"}}
		if o := op.await(context.Background(), p); o.reason != ReasonFailoverError {
			t.Errorf("reason %s for an early stop; want failover-error", o.reason)
		}
	})
}
