package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ffgen/ffgen/internal/frame"
	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/metadata"
	"github.com/ffgen/ffgen/runtime/transport"
)

// seen records what interceptors saw, from any goroutine.
type seen struct {
	mu  sync.Mutex
	got []string
}

func (s *seen) add(format string, args ...any) {
	s.mu.Lock()
	s.got = append(s.got, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// serverSeen installs a server interceptor on every node that records the
// node, the method, the attempt number and the incoming metadata key.
func serverSeen(rec *seen, key string) func(string, *runtime.ServerConfig) {
	return func(node string, cfg *runtime.ServerConfig) {
		cfg.Interceptors = append(cfg.Interceptors, func(ctx context.Context, m *runtime.MethodDesc, args codec.Message, next runtime.Handler) (codec.Message, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			rec.add("%s %s #%d %s=%s", node, m.Name, runtime.AttemptFrom(ctx).Number, key, strings.Join(md.Get(key), ","))
			return next(ctx, args)
		})
	}
}

func TestMetadataFromClientInterceptorReachesServerInterceptorAfterFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var server seen
		e := newEnv(t, fftest.Config{Server: serverSeen(&server, "x-request-id")})
		var attempts seen
		cl := e.Client(t, func(cfg *runtime.ClientConfig) {
			cfg.Interceptors = []runtime.OperationInterceptor{
				func(ctx context.Context, m *runtime.MethodDesc, args, reply codec.Message, next runtime.Invoker) error {
					return next(metadata.AppendToOutgoingContext(ctx, "X-Request-ID", "req-42"), m, args, reply)
				},
			}
			cfg.AttemptInterceptors = []runtime.AttemptInterceptor{
				func(ctx context.Context, a *runtime.ClientAttempt, next func(context.Context) runtime.AttemptResult) runtime.AttemptResult {
					res := next(ctx)
					attempts.add("#%d %s/%s after=%s ended=%s", a.Number, a.Group, a.Node, a.After, res.Reason)
					return res
				},
			}
		})
		synctest.Wait()
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		got, err := testledger.NewClient(cl).Add(t.Context(), "acct", 3)
		if err != nil || got != 3 {
			t.Fatalf("Add = %d, %v; want 3, nil", got, err)
		}
		group := func(node string) string { return e.Node(node).Group }
		want := []string{
			fmt.Sprintf("#0 %s/%s after=none ended=failover-error", group(own[0]), own[0]),
			fmt.Sprintf("#1 %s/%s after=failover-error ended=none", group(own[1]), own[1]),
		}
		if diff := cmp.Diff(want, attempts.list()); diff != "" {
			t.Errorf("attempts (-want +got):\n%s", diff)
		}
		want = []string{
			own[0] + " Add #0 x-request-id=req-42",
			own[1] + " Add #1 x-request-id=req-42",
		}
		if diff := cmp.Diff(want, server.list()); diff != "" {
			t.Errorf("server interceptors (-want +got):\n%s", diff)
		}
	})
}

func TestAttemptInterceptorMetadataGoesWithItsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var server seen
		e := newEnv(t, fftest.Config{Server: serverSeen(&server, "attempt")})
		cl := e.Client(t, func(cfg *runtime.ClientConfig) {
			cfg.AttemptInterceptors = []runtime.AttemptInterceptor{
				func(ctx context.Context, a *runtime.ClientAttempt, next func(context.Context) runtime.AttemptResult) runtime.AttemptResult {
					return next(metadata.AppendToOutgoingContext(ctx, "attempt", fmt.Sprint(a.Number)))
				},
			}
		})
		synctest.Wait()
		own := e.owners(t, "acct")
		e.ledgers[own[0]].SetHook(func(context.Context, string, int64) error { return testledger.ErrBusy })
		ctx := metadata.NewOutgoingContext(t.Context(), metadata.Pairs("attempt", "op"))
		if _, err := testledger.NewClient(cl).Add(ctx, "acct", 1); err != nil {
			t.Fatal(err)
		}
		want := []string{own[0] + " Add #0 attempt=op,0", own[1] + " Add #1 attempt=op,1"}
		if diff := cmp.Diff(want, server.list()); diff != "" {
			t.Errorf("server saw (-want +got):\n%s", diff)
		}
	})
}

func TestHandlerReadsMetadataFromItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		own := e.owners(t, "acct")
		var got []string
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			got = metadata.ValueFromIncomingContext(ctx, "Tenant")
			return nil
		})
		ctx := metadata.AppendToOutgoingContext(t.Context(), "tenant", "blue", "tenant", "green")
		if _, err := e.ledger.Add(ctx, "acct", 1); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"blue", "green"}, got); diff != "" {
			t.Errorf("handler saw (-want +got):\n%s", diff)
		}
		// A call without metadata has none on the server.
		e.ledgers[own[0]].SetHook(func(ctx context.Context, _ string, _ int64) error {
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				return fmt.Errorf("unexpected metadata %v", md)
			}
			return nil
		})
		if _, err := e.ledger.Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBadMetadataFailsBeforeSending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		for _, tt := range []struct {
			name string
			md   metadata.MD
			want error
		}{
			{"space in key", metadata.MD{"bad key": {"v"}}, metadata.ErrInvalid},
			{"uppercase key", metadata.MD{"Upper": {"v"}}, metadata.ErrInvalid},
			{"empty key", metadata.MD{"": {"v"}}, metadata.ErrInvalid},
			{"too large", metadata.Pairs("k", strings.Repeat("x", metadata.MaxSize)), metadata.ErrTooLarge},
		} {
			_, err := e.ledger.Add(metadata.NewOutgoingContext(t.Context(), tt.md), "acct", 1)
			if !errors.Is(err, tt.want) {
				t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
			}
		}
		for name, l := range e.ledgers {
			if n := l.Executions(); n != 0 {
				t.Errorf("%s ran %d times; nothing should have been sent", name, n)
			}
		}
	})
}

func TestServerRefusesMetadataABadPeerSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		node := e.Nodes[0].Name
		got := make(frames, 1)
		conn, err := e.Net.Transport(transport.Config{Node: "raw"}).Dial(t.Context(), node, got)
		if err != nil {
			t.Fatal(err)
		}
		err = conn.Send(&frame.Attempt{Call: 1, OpID: [16]byte{9}, Service: "test.Ledger", Method: "Add",
			Entities: []string{"acct"}, Payload: (&testledger.AddArgs{Account: "acct", Amount: 5}).AppendFF(nil),
			Metadata: []string{"Not Valid", "v"}})
		if err != nil {
			t.Fatal(err)
		}
		r := (<-got).(*frame.Result)
		if r.Status != frame.StatusFail || !strings.Contains(r.Message, "invalid key") {
			t.Errorf("result %+v, want a Fail naming the invalid key", r)
		}
		if n := e.ledgers[node].Executions(); n != 0 {
			t.Errorf("handler ran %d times, want 0", n)
		}
	})
}

func TestCallerOperationIDSentTwiceRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		ctx := runtime.WithOperationID(t.Context(), [16]byte{0xca, 0x11})
		first, err := e.ledger.Add(ctx, "acct", 5)
		if err != nil {
			t.Fatal(err)
		}
		// The caller's own retry, as after a lost answer: same ID.
		again, err := e.ledger.Add(ctx, "acct", 5)
		if err != nil {
			t.Fatal(err)
		}
		if first != 5 || again != 5 {
			t.Errorf("answers %d and %d, want 5 twice (the remembered result)", first, again)
		}
		runs := 0
		for _, l := range e.ledgers {
			runs += l.Executions()
		}
		if runs != 1 {
			t.Errorf("handler ran %d times, want 1", runs)
		}
		// A new ID is a new operation.
		if got, err := e.ledger.Add(t.Context(), "acct", 5); err != nil || got != 10 {
			t.Errorf("Add under a fresh ID = %d, %v; want 10", got, err)
		}
	})
}

func TestOperationTimeoutPerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		for _, l := range e.ledgers {
			l.SetHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return ctx.Err() })
		}
		start := time.Now()
		ctx := runtime.WithOperationTimeout(t.Context(), 300*time.Millisecond)
		_, err := e.ledger.Add(ctx, "acct", 1)
		var fe *runtime.Error
		if !errors.As(err, &fe) || fe.Reason != runtime.ReasonDeadline || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want an *Error with reason deadline", err)
		}
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Errorf("the call took %s, want the per-call 300ms", d)
		}
		_, err = e.ledger.Add(runtime.WithOperationTimeout(t.Context(), 0), "acct", 1)
		if err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("zero timeout: err = %v, want it refused", err)
		}
	})
}

func TestServerInterceptorRefusesWithADeclaredError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.Interceptors = []runtime.ServerInterceptor{
				func(ctx context.Context, m *runtime.MethodDesc, args codec.Message, next runtime.Handler) (codec.Message, error) {
					if v := metadata.ValueFromIncomingContext(ctx, "token"); len(v) != 1 || v[0] != "secret" {
						return nil, testledger.ErrRejected
					}
					return next(ctx, args)
				},
			}
		}})
		if _, err := e.ledger.Add(t.Context(), "acct", 1); !errors.Is(err, testledger.ErrRejected) {
			t.Fatalf("without the token: err = %v, want ErrRejected", err)
		}
		ctx := metadata.AppendToOutgoingContext(t.Context(), "token", "secret")
		if got, err := e.ledger.Add(ctx, "acct", 1); err != nil || got != 1 {
			t.Fatalf("with the token: %d, %v", got, err)
		}
		runs := 0
		for _, l := range e.ledgers {
			runs += l.Executions()
		}
		if runs != 1 {
			t.Errorf("handler ran %d times, want 1 (the refused call must not run)", runs)
		}
	})
}

func TestAttemptInterceptorThatDoesNotSendEndsTheOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		errNo := errors.New("not today")
		cl := e.Client(t, func(cfg *runtime.ClientConfig) {
			cfg.AttemptInterceptors = []runtime.AttemptInterceptor{
				func(context.Context, *runtime.ClientAttempt, func(context.Context) runtime.AttemptResult) runtime.AttemptResult {
					return runtime.AttemptResult{Err: errNo}
				},
			}
		})
		synctest.Wait()
		if _, err := testledger.NewClient(cl).Add(t.Context(), "acct", 1); !errors.Is(err, errNo) {
			t.Fatalf("err = %v, want the interceptor's", err)
		}
		for name, l := range e.ledgers {
			if n := l.Executions(); n != 0 {
				t.Errorf("%s ran %d times, want 0", name, n)
			}
		}
	})
}

func TestOperationInterceptorsNestInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, fftest.Config{})
		var order seen
		wrap := func(name string) runtime.OperationInterceptor {
			return func(ctx context.Context, m *runtime.MethodDesc, args, reply codec.Message, next runtime.Invoker) error {
				order.add("%s>%s", name, m.Name)
				err := next(ctx, m, args, reply)
				order.add("<%s", name)
				return err
			}
		}
		cl := e.Client(t, func(cfg *runtime.ClientConfig) {
			cfg.Interceptors = []runtime.OperationInterceptor{wrap("outer"), wrap("inner")}
		})
		synctest.Wait()
		if _, err := testledger.NewClient(cl).Add(t.Context(), "acct", 1); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"outer>Add", "inner>Add", "<inner", "<outer"}, order.list()); diff != "" {
			t.Errorf("order (-want +got):\n%s", diff)
		}
	})
}

func TestMetadataReachesEveryReplicaOfAReplicatedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var server seen
		e := newReplicatedEnv(t, fftest.Config{PerGroup: 2, Server: serverSeen(&server, "x-trace")})
		e.ledger.AddMethod = scatterAdd()
		if _, err := e.ledger.Add(t.Context(), "x", 100); err != nil {
			t.Fatal(err)
		}
		// One node misses the write and gets it later by catching up.
		paused := e.Nodes[1].Name
		e.Net.Pause(paused)
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-trace", "t1")
		if _, err := e.ledger.Transfer(ctx, "x", "y", 5); err != nil {
			t.Fatal(err)
		}
		e.Net.Resume(paused)
		e.WaitConverged(t)
		ran := map[string]bool{}
		for _, s := range server.list() {
			if f := strings.Fields(s); f[1] == "Transfer" {
				if f[3] != "x-trace=t1" {
					t.Errorf("%s ran the write with %s, want x-trace=t1", f[0], f[3])
				}
				ran[f[0]] = true
			}
		}
		if len(ran) != len(e.Nodes) {
			t.Errorf("the write ran with its metadata on %v, want every node", ran)
		}
	})
}

// Metadata goes with a hedged attempt and with an attempt a handler
// forwarded, as with a failover.
func TestMetadataGoesWithHedgeAndForward(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(e *env, primary, next string)
	}{
		{"hedge", func(e *env, primary, _ string) {
			e.ledger.AddMethod = hedgeAdd(20 * time.Millisecond)
			e.ledgers[primary].SetHook(func(ctx context.Context, _ string, _ int64) error { <-ctx.Done(); return ctx.Err() })
		}},
		{"forward", func(e *env, primary, next string) {
			e.ledgers[primary].SetHook(func(context.Context, string, int64) error { return runtime.ForwardTo(next) })
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var server seen
				e := newEnv(t, fftest.Config{Server: serverSeen(&server, "x-request-id")})
				own := e.owners(t, "acct")
				tt.setup(e, own[0], own[1])
				ctx := metadata.AppendToOutgoingContext(t.Context(), "x-request-id", "r1")
				if got, err := e.ledger.Add(ctx, "acct", 2); err != nil || got != 2 {
					t.Fatalf("Add = %d, %v", got, err)
				}
				synctest.Wait()
				var onNext string
				for _, s := range server.list() {
					if strings.HasPrefix(s, own[1]+" ") {
						onNext = s
					}
				}
				if !strings.HasSuffix(onNext, "x-request-id=r1") {
					t.Errorf("%s ran the operation with %q; want x-request-id=r1 (all: %q)", own[1], onNext, server.list())
				}
			})
		})
	}
}
