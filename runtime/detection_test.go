package runtime_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/transport"
)

// The server acknowledges an attempt as it arrives, before any heartbeat,
// whether it starts, queues or joins a running copy; a client that does
// not say it reads acks gets none.
func TestAttemptIsAcknowledgedOnArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		e.ledgers["a1"].SetHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return ctx.Err() })
		var mu sync.Mutex
		var got []string
		h := frameFunc(func(f frame.Frame) {
			mu.Lock()
			defer mu.Unlock()
			switch f := f.(type) {
			case *frame.Ack:
				got = append(got, "ack "+string(rune('0'+f.Call)))
			default:
				got = append(got, f.Type().String())
			}
		})
		c, err := e.Net.Transport(transport.Config{Node: "raw"}).Dial(t.Context(), "a1", h)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		attempt := func(call uint64, op byte, account string, flags frame.AttemptFlags) {
			args := (&testledger.AddArgs{Account: account, Amount: 1}).AppendFF(nil)
			if err := c.Send(&frame.Attempt{Call: call, OpID: [16]byte{op}, Timeout: time.Second, Heartbeat: time.Hour,
				Service: "test.Ledger", Method: "Add", Entities: []string{account}, Flags: flags, Payload: args}); err != nil {
				t.Fatal(err)
			}
		}
		attempt(1, 1, "x", frame.FlagAck) // runs
		attempt(2, 2, "x", frame.FlagAck) // queued behind it
		attempt(3, 1, "x", frame.FlagAck) // joins the first
		attempt(4, 3, "y", 0)             // an older client: no ack
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"ack 1", "ack 2", "ack 3"}; !slices.Equal(got, want) {
			t.Errorf("frames before any time passed: %q, want %q", got, want)
		}
	})
}

// An attempt the node acknowledged, which then went silent, was delivered
// to a node for sure: the error says acknowledged, not just sent.
func TestAckedAttemptIsAcknowledged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.MaxFailovers = 0
		e := newEnv(t, fftest.Config{Settings: s})
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			synctest.Wait() // the ack has reached the client
			e.Net.Pause(own[0])
			<-ctx.Done()
			return ctx.Err()
		})
		start := time.Now()
		_, err := e.ledger.Add(t.Context(), "acct", 1)
		re := wantError(t, err)
		if re.Reason != runtime.ReasonHeartbeatTimeout || re.Delivery != runtime.Acknowledged {
			t.Errorf("got %v; want a heartbeat timeout of an acknowledged attempt", err)
		}
		if took := time.Since(start); took != s.HeartbeatTimeout {
			t.Errorf("the heartbeat timeout took %v, want exactly %v from the ack", took, s.HeartbeatTimeout)
		}
		e.Net.Resume(own[0])
	})
}

// One heartbeat timeout suspects the node briefly (four heartbeat
// timeouts), a repeat twice as long, a broken connection SuspectFor; any
// frame from a node suspected for its silence clears the suspicion.
func TestSuspicionIsProportionate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		s := e.Settings
		own := e.owners(t, "acct")
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil { // connected: no dial to wait for
			t.Fatal(err)
		}
		e.Net.Pause(own[0]) // frozen throughout: nothing from it clears the suspicion
		first := 4 * s.HeartbeatTimeout
		for i, d := range []time.Duration{first, 2 * first, 4 * first} {
			if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(d - time.Millisecond)
			if !e.client.Suspected(own[0]) {
				t.Fatalf("heartbeat timeout %d: %s not suspected just before %v", i+1, own[0], d)
			}
			time.Sleep(2 * time.Millisecond)
			if e.client.Suspected(own[0]) {
				t.Fatalf("heartbeat timeout %d: %s still suspected after %v", i+1, own[0], d)
			}
		}
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if !e.client.Suspected(own[0]) {
			t.Fatalf("%s not suspected after a fourth heartbeat timeout", own[0])
		}
		e.Net.Resume(own[0]) // the frames it held back arrive
		synctest.Wait()
		if e.client.Suspected(own[0]) {
			t.Errorf("%s still suspected after frames from it arrived", own[0])
		}

		// A broken connection is no stall: a node that cannot be dialed
		// again is suspected for SuspectFor (one that can is forgiven,
		// TestUnreachableNodeIsForgivenOnceReachable).
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			e.Net.BlockDials("client1", own[0])
			e.Net.ResetNode(own[0])
			<-ctx.Done()
			return ctx.Err()
		})
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(s.SuspectFor - time.Millisecond)
		if !e.client.Suspected(own[0]) {
			t.Errorf("%s not suspected for SuspectFor (%v) after its connection broke", own[0], s.SuspectFor)
		}
		e.Net.HealAll()
	})
}

// Attempts of a client that counts heartbeats for all of a connection
// (frame.FlagAllBeat) are vouched for by the heartbeat's All, with no
// item each; attempts of an older client are listed one by one, on the
// same connection too.
func TestHeartbeatStandsForAllAttemptsOfClientsThatCountIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		e.ledgers["a1"].SetHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return ctx.Err() })
		var mu sync.Mutex
		var beats []frame.Heartbeat
		h := frameFunc(func(f frame.Frame) {
			if hb, ok := f.(*frame.Heartbeat); ok {
				mu.Lock()
				beats = append(beats, frame.Heartbeat{All: hb.All, Items: slices.Clone(hb.Items)})
				mu.Unlock()
			}
		})
		c, err := e.Net.Transport(transport.Config{Node: "raw"}).Dial(t.Context(), "a1", h)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const interval = 50 * time.Millisecond
		attempt := func(call uint64, account string, flags frame.AttemptFlags) {
			args := (&testledger.AddArgs{Account: account, Amount: 1}).AppendFF(nil)
			if err := c.Send(&frame.Attempt{Call: call, OpID: [16]byte{byte(call)}, Timeout: time.Second, Heartbeat: interval,
				Service: "test.Ledger", Method: "Add", Entities: []string{account}, Flags: flags, Payload: args}); err != nil {
				t.Fatal(err)
			}
		}
		attempt(1, "x", frame.FlagAck|frame.FlagAllBeat)
		attempt(2, "y", frame.FlagAck|frame.FlagAllBeat)
		attempt(3, "z", frame.FlagAck) // an older client's
		time.Sleep(3 * interval)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(beats) < 2 {
			t.Fatalf("%d heartbeats in three intervals", len(beats))
		}
		for i, hb := range beats {
			if !hb.All || len(hb.Items) != 1 || hb.Items[0].Call != 3 {
				t.Errorf("heartbeat %d: %+v; want All, and only call 3 listed", i, hb)
			}
		}
	})
}

// A tick with nothing to list for a connection whose attempts All stands
// for sends All without walking them; each thing that would make a walk
// find more still gets onto the wire within an interval: progress, an
// older client's attempt joining the connection, and an attempt that
// queued past its time.
func TestHeartbeatShortcutMissesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		progress := make(chan string)
		e.ledgers["a1"].SetHook(func(ctx context.Context, account string, _ int64) error {
			if account == "x" {
				for {
					select {
					case p := <-progress:
						runtime.ReportProgress(ctx, []byte(p))
					case <-ctx.Done():
						return ctx.Err()
					}
				}
			}
			<-ctx.Done()
			return ctx.Err()
		})
		var mu sync.Mutex
		var beats []frame.Heartbeat
		results := make(map[uint64]*frame.Result)
		h := frameFunc(func(f frame.Frame) {
			mu.Lock()
			defer mu.Unlock()
			switch f := f.(type) {
			case *frame.Heartbeat:
				hb := frame.Heartbeat{All: f.All}
				for _, it := range f.Items {
					hb.Items = append(hb.Items, frame.HeartbeatItem{Call: it.Call, Progress: slices.Clone(it.Progress)})
				}
				beats = append(beats, hb)
			case *frame.Result:
				r := *f
				results[f.Call] = &r
			}
		})
		c, err := e.Net.Transport(transport.Config{Node: "raw"}).Dial(t.Context(), "a1", h)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const interval = 50 * time.Millisecond
		attempt := func(call uint64, account string, timeout time.Duration, flags frame.AttemptFlags) {
			args := (&testledger.AddArgs{Account: account, Amount: 1}).AppendFF(nil)
			if err := c.Send(&frame.Attempt{Call: call, OpID: [16]byte{byte(call)}, Timeout: timeout, Heartbeat: interval,
				Service: "test.Ledger", Method: "Add", Entities: []string{account}, Flags: flags, Payload: args}); err != nil {
				t.Fatal(err)
			}
		}
		// take returns the heartbeats since the last call.
		take := func() []frame.Heartbeat {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			out := beats
			beats = nil
			return out
		}
		const all = frame.FlagAck | frame.FlagAllBeat
		attempt(1, "x", 10*time.Second, all)
		attempt(2, "y", 10*time.Second, all)
		time.Sleep(4 * interval)
		got := take()
		if len(got) < 3 {
			t.Fatalf("%d heartbeats in four intervals", len(got))
		}
		for i, hb := range got {
			if !hb.All || len(hb.Items) != 0 {
				t.Fatalf("heartbeat %d: %+v; want All and nothing listed", i, hb)
			}
		}

		// Queued behind call 1 on its entity, with a short time of its own.
		attempt(4, "x", 300*time.Millisecond, all)
		time.Sleep(interval)
		take()
		progress <- "half"
		time.Sleep(interval)
		got = take()
		if len(got) == 0 || len(got[0].Items) != 1 || got[0].Items[0].Call != 1 || string(got[0].Items[0].Progress) != "half" {
			t.Fatalf("heartbeats in the interval after progress: %+v; want call 1 listed with it", got)
		}
		time.Sleep(300*time.Millisecond - interval)
		synctest.Wait()
		mu.Lock()
		r := results[4]
		mu.Unlock()
		if r == nil || r.Status != frame.StatusFailover || !strings.Contains(r.Message, "expired while queued") {
			t.Fatalf("attempt queued past its time: %+v; want it failed over as expired within an interval", r)
		}

		take()
		attempt(3, "z", 10*time.Second, frame.FlagAck) // an older client's
		time.Sleep(interval)
		got = take()
		if len(got) == 0 || len(got[0].Items) != 1 || got[0].Items[0].Call != 3 {
			t.Fatalf("heartbeats in the interval after an older client's attempt: %+v; want call 3 listed", got)
		}
	})
}

// A handler that ignores its context past the attempt timeout its server
// allows (MaxAttemptTimeout, shorter than the client asked for) is
// heartbeated no more, so its client fails over a heartbeat timeout after
// the server's deadline, not at its own; another long attempt on the same
// connection, still within its time, is listed by name meanwhile and
// runs on.
func TestOverrunHandlerIsNotVouchedForByAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := runtime.DefaultSettings()
		s.AttemptTimeout = 5 * time.Second
		s.OperationTimeout = 20 * time.Second
		s.MaxFailovers = 0
		e := newEnv(t, fftest.Config{Settings: s, Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.MaxAttemptTimeout = time.Second
		}})
		own := e.owners(t, "stuck")[0]
		other := e.ownedBy(t, own, "busy-", 1)[0]
		if other == "" {
			t.Fatal("no second account with the same owner")
		}
		e.ledgers[own].SetHook(func(ctx context.Context, account string, _ int64) error {
			if account == "stuck" {
				time.Sleep(3 * time.Second) // ignores its context
				return nil
			}
			select {
			case <-time.After(900 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		busy := make(chan error, 1)
		start := time.Now()
		go func() {
			// It runs from 0.5 s to 1.4 s, across the stuck one's deadline.
			time.Sleep(500 * time.Millisecond)
			_, err := e.ledger.Add(t.Context(), other, 1)
			busy <- err
		}()
		_, err := e.ledger.Add(t.Context(), "stuck", 1)
		took := time.Since(start)
		if re := wantError(t, err); re.Reason != runtime.ReasonHeartbeatTimeout {
			t.Errorf("stuck handler: %v; want a heartbeat timeout", err)
		}
		if limit := time.Second + s.HeartbeatTimeout; took > limit {
			t.Errorf("the stuck attempt ended after %v; want within %v of the server's deadline", took, limit)
		}
		if err := <-busy; err != nil {
			t.Errorf("the other long attempt on the connection: %v", err)
		}
	})
}
