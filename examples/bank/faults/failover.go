//go:build unix

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ffgen/ffgen/examples/bank"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/cluster"
	"github.com/ffgen/ffgen/runtime/transport"
)

// leaderStops is how many times the leader-stop row SIGSTOPs the leader.
const leaderStops = 20

// ack is a prober's write acknowledged: when, and by which node.
type ack struct {
	at   time.Time
	node string
}

// leaderStop measures how fast a frozen leader is passed over, under the
// load: leaderStops times, it SIGSTOPs the node that leads the ledger's
// writes while a prober of its own writes one deposit after another, and
// takes the time from the SIGSTOP to the first deposit acknowledged after
// it, which only a new leader can have acknowledged. The row fails if the
// 99th percentile is over twice the heartbeat timeout.
// thinClient is a client named node that follows the cluster through its
// management endpoints, as a thin client does, once every group serves
// service; close closes it and the following.
func (e *env) thinClient(ctx context.Context, node, service string, intercept ...runtime.AttemptInterceptor) (c *runtime.Client, close func(), err error) {
	f, err := cluster.Follow(cluster.FollowConfig{Nodes: e.MgmtAddrs(), Token: e.Token()})
	if err != nil {
		return nil, nil, err
	}
	settings := runtime.DefaultSettings()
	settings.Groups = []string{"a", "b"}
	settings.HeartbeatTimeout = e.suite.heartbeatTimeout()
	tcp, err := transport.NewTCP(transport.TCPConfig{Config: transport.Config{Node: node}})
	if err == nil {
		err = f.Wait(ctx, service, settings.Groups)
	}
	if err == nil {
		c, err = runtime.NewClient(runtime.ClientConfig{Transport: tcp, Membership: f, Settings: settings, AttemptInterceptors: intercept})
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); f.Close() }, nil
}

func leaderStop(ctx context.Context, e *env) error {
	if err := e.at(ctx, e.start()); err != nil {
		return err
	}
	// The node that answered each write: the first write after the SIGSTOP
	// answered by another node is the one a new leader acknowledged.
	var answered sync.Map // op ID → node
	who := func(ctx context.Context, a *runtime.ClientAttempt, next func(context.Context) runtime.AttemptResult) runtime.AttemptResult {
		res := next(ctx)
		if res.Reason == runtime.ReasonNone {
			answered.Store(a.OpID, a.Node)
		}
		return res
	}
	c, closeClient, err := e.thinClient(ctx, "prober", bank.AccountsDesc.Name, who)
	if err != nil {
		return err
	}
	defer closeClient()
	accts := bank.NewAccountsClient(c)
	id := fmt.Sprintf("prober-%d", time.Now().UnixNano())
	if _, err := accts.Open(ctx, bank.OpenRequest{AccountID: id}); err != nil {
		return fmt.Errorf("prober: open: %w", err)
	}
	acked := make(chan ack, 1024)
	failed := make(chan string, 64) // the prober's errors, for a slow round's note
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for i := 0; pctx.Err() == nil; i++ {
			var op [16]byte
			binary.BigEndian.PutUint64(op[:], uint64(time.Now().UnixNano()))
			binary.BigEndian.PutUint64(op[8:], uint64(i))
			_, err := accts.Deposit(runtime.WithOperationID(pctx, op), bank.DepositRequest{AccountID: id, Amount: 1})
			if err != nil && pctx.Err() == nil {
				select {
				case failed <- fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), err):
				default:
				}
			}
			if err == nil {
				node, _ := answered.LoadAndDelete(op)
				select {
				case acked <- ack{at: time.Now(), node: node.(string)}:
				default:
				}
			}
		}
	}()
	var took []time.Duration
	for i := range leaderStops {
		// Each stop starts from a cluster that agrees on its leader: the
		// previous stop's leader has thawed and heard of the new one.
		name, err := agreedLeader(ctx, e)
		if err != nil {
			return err
		}
		n := e.Node(name)
		for len(acked) > 0 {
			<-acked
		}
		for len(failed) > 0 {
			<-failed
		}
		stopped := time.Now()
		if err := e.Signal(n, syscall.SIGSTOP); err != nil {
			return err
		}
		var first time.Time
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case a := <-acked:
				if a.at.After(stopped) && a.node != name {
					first = a.at
					break wait
				}
			case <-deadline:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
		// Frozen a second in all, so that the old leader thaws into a
		// newer term; then it must catch up before the next round.
		sleep(context.WithoutCancel(ctx), time.Until(stopped.Add(time.Second)))
		if err := e.Signal(n, syscall.SIGCONT); err != nil {
			return err
		}
		if first.IsZero() {
			e.note("stop %d of %s: no write acknowledged within 10s", i+1, name)
			return fmt.Errorf("leader %s stopped: no write acknowledged within 10s", name)
		}
		took = append(took, first.Sub(stopped))
		if d := first.Sub(stopped); d > 2*e.suite.heartbeatTimeout() {
			e.note("stop %d of %s at %s took %s; the prober's errors meanwhile:", i+1, name, stopped.Format("15:04:05.000"), d.Round(time.Millisecond))
			for len(failed) > 0 {
				e.note("  %s", <-failed)
			}
		}
		e.recover(n)
		if err := e.WaitReady(ctx, 30*time.Second, n); err != nil {
			return err
		}
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[(len(took)*99+99)/100-1]
	bound := 2 * e.suite.heartbeatTimeout()
	var all []string
	for _, d := range took {
		all = append(all, d.Round(time.Millisecond).String())
	}
	e.note("SIGSTOP of the leader to the first write acknowledged by the new one, %d times: p50 %s, p99 %s (bound %s): %s",
		len(took), p50.Round(time.Millisecond), p99.Round(time.Millisecond), bound, strings.Join(all, " "))
	if p99 > bound {
		return fmt.Errorf("a frozen leader was passed over in %s at the 99th percentile, over twice the heartbeat timeout (%s)", p99.Round(time.Millisecond), bound)
	}
	return nil
}
