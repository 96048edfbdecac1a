package otelffgen_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/fftest"
	"github.com/ffgen/ffgen/runtime/internal/testledger"
	"github.com/ffgen/ffgen/runtime/otelffgen"
)

// serveLedger serves the test ledger on every node of c, declining every
// first attempt of an Add: each operation fails over once.
func serveLedger(t *testing.T, c *fftest.Cluster) {
	c.Serve(t, testledger.PlainDesc, func(n *fftest.Node) any {
		l := testledger.NewMem(n.Name)
		l.SetHook(func(ctx context.Context, _ string, _ int64) error {
			if runtime.AttemptFrom(ctx).Number == 0 {
				return testledger.ErrBusy
			}
			return nil
		})
		return l
	})
}

func TestSpanTreeOfAFailedOverOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		opts := []otelffgen.Option{otelffgen.WithTracerProvider(tp), otelffgen.WithMeterProvider(mp),
			otelffgen.WithPropagator(propagation.TraceContext{})}

		c := fftest.New(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.Interceptors = append(cfg.Interceptors, otelffgen.ServerInterceptor(opts...))
		}})
		serveLedger(t, c)
		client := c.Client(t, func(cfg *runtime.ClientConfig) {
			cfg.Interceptors = append(cfg.Interceptors, otelffgen.OperationInterceptor(opts...))
			cfg.AttemptInterceptors = append(cfg.AttemptInterceptors, otelffgen.AttemptInterceptor(opts...))
		})
		synctest.Wait()
		if _, err := testledger.NewClient(client).Add(t.Context(), "k", 1); err != nil {
			t.Fatal(err)
		}

		got := spans.GetSpans()
		t.Logf("span tree:\n%s", Render(got))
		if len(got) != 5 {
			t.Fatalf("%d spans, want 5 (operation, two attempts, two server spans):\n%s", len(got), Render(got))
		}
		children := map[trace.SpanID][]tracetest.SpanStub{}
		var roots []tracetest.SpanStub
		for _, s := range got {
			if s.SpanContext.TraceID() != got[0].SpanContext.TraceID() {
				t.Errorf("span %s is in another trace", s.Name)
			}
			if s.Parent.IsValid() {
				children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
			} else {
				roots = append(roots, s)
			}
		}
		if len(roots) != 1 || roots[0].Name != "test.Ledger/Add" || roots[0].SpanKind != trace.SpanKindClient {
			t.Fatalf("roots %v, want the one operation span", names(roots))
		}
		op := roots[0]
		if v := attr(op, otelffgen.AttrOutcome); v != "ok" {
			t.Errorf("operation outcome %q, want ok", v)
		}
		attempts := children[op.SpanContext.SpanID()]
		slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int {
			return strings.Compare(attr(a, otelffgen.AttrAttempt), attr(b, otelffgen.AttrAttempt))
		})
		if len(attempts) != 2 {
			t.Fatalf("operation span has children %v, want two attempt spans", names(attempts))
		}
		first, second := attempts[0], attempts[1]
		for i, a := range attempts {
			if a.Name != "test.Ledger/Add attempt" || attr(a, otelffgen.AttrAttempt) != fmt.Sprint(i) ||
				attr(a, otelffgen.AttrNode) == "" || attr(a, otelffgen.AttrGroup) == "" {
				t.Errorf("attempt span %d: %s %v", i, a.Name, a.Attributes)
			}
		}
		if attr(first, otelffgen.AttrGroup) == attr(second, otelffgen.AttrGroup) {
			t.Errorf("both attempts in group %s; the failover goes to the next group", attr(first, otelffgen.AttrGroup))
		}
		if attr(first, otelffgen.AttrEndReason) != "failover-error" || first.Status.Code != codes.Error {
			t.Errorf("first attempt ended %q (%v), want failover-error, an error", attr(first, otelffgen.AttrEndReason), first.Status)
		}
		if attr(first, otelffgen.AttrFailoverReason) != "" {
			t.Errorf("first attempt has a failover reason %q", attr(first, otelffgen.AttrFailoverReason))
		}
		if attr(second, otelffgen.AttrFailoverReason) != "failover-error" || attr(second, otelffgen.AttrEndReason) != "none" {
			t.Errorf("second attempt: failover reason %q, end %q; want failover-error, none",
				attr(second, otelffgen.AttrFailoverReason), attr(second, otelffgen.AttrEndReason))
		}
		// The server span is a child of its attempt's span, across the wire.
		for _, a := range attempts {
			srv := children[a.SpanContext.SpanID()]
			if len(srv) != 1 || srv[0].SpanKind != trace.SpanKindServer || srv[0].Name != "test.Ledger/Add" ||
				attr(srv[0], otelffgen.AttrAttempt) != attr(a, otelffgen.AttrAttempt) || !srv[0].Parent.IsRemote() {
				t.Errorf("attempt %s: children %v, want one remote-parented server span of the same attempt",
					attr(a, otelffgen.AttrAttempt), names(srv))
			}
		}
		if attr(op, otelffgen.AttrOpID) == "" || attr(op, otelffgen.AttrOpID) != attr(first, otelffgen.AttrOpID) {
			t.Errorf("operation ID %q on the operation, %q on the attempt", attr(op, otelffgen.AttrOpID), attr(first, otelffgen.AttrOpID))
		}

		// The metrics count the same story.
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			attr attribute.KeyValue
			want int64
		}{
			{"ffgen.client.operations", otelffgen.AttrOutcome.String("ok"), 1},
			{"ffgen.client.attempts", otelffgen.AttrEndReason.String("failover-error"), 1},
			{"ffgen.client.attempts", otelffgen.AttrEndReason.String("none"), 1},
			{"ffgen.client.failovers", otelffgen.AttrFailoverReason.String("failover-error"), 1},
			{"ffgen.server.handled", otelffgen.AttrOutcome.String("ok"), 1},
			{"ffgen.server.handled", otelffgen.AttrOutcome.String("error"), 1},
		} {
			if got := sum(rm, c.name, c.attr); got != c.want {
				t.Errorf("%s{%s} = %d, want %d", c.name, c.attr.Value.String(), got, c.want)
			}
		}
		if n := histCount(rm, "ffgen.client.operation.duration"); n != 1 {
			t.Errorf("operation duration recorded %d times, want 1", n)
		}
	})
}

func attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

func names(ss []tracetest.SpanStub) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name+" ("+s.SpanKind.String()+")")
	}
	return out
}

func sum(rm metricdata.ResourceMetrics, name string, want attribute.KeyValue) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := dp.Attributes.Value(want.Key); ok && v == want.Value {
					n += dp.Value
				}
			}
		}
	}
	return n
}

func histCount(rm metricdata.ResourceMetrics, name string) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

// Render draws spans as a tree, children in start order, with the
// attributes that tell an ffgen operation's story. docs/observability.md
// shows its output for this test's operation.
func Render(spans tracetest.SpanStubs) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if s.Parent.IsValid() {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, indent, branch string)
	walk = func(s tracetest.SpanStub, indent, branch string) {
		fmt.Fprintf(&b, "%s%s%s [%s]", indent, branch, s.Name, s.SpanKind)
		for _, k := range []attribute.Key{otelffgen.AttrAttempt, otelffgen.AttrNode, otelffgen.AttrGroup,
			otelffgen.AttrFailoverReason, otelffgen.AttrEndReason, otelffgen.AttrCaller, otelffgen.AttrOutcome} {
			if v := attr(s, k); v != "" {
				fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(string(k), "ffgen."), v)
			}
		}
		if s.Status.Code == codes.Error {
			b.WriteString(" ERROR")
		}
		b.WriteString("\n")
		kids := children[s.SpanContext.SpanID()]
		slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		next := indent
		switch branch {
		case "├─ ":
			next += "│  "
		case "└─ ":
			next += "   "
		}
		for i, k := range kids {
			br := "├─ "
			if i == len(kids)-1 {
				br = "└─ "
			}
			walk(k, next, br)
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	return b.String()
}

// With the operation interceptor alone, the server span is a child of the
// operation span: the operation's span context goes with every attempt.
func TestOperationSpanPropagatesWithoutAttemptInterceptor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		spans := tracetest.NewInMemoryExporter()
		opts := []otelffgen.Option{otelffgen.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))),
			otelffgen.WithMeterProvider(sdkmetric.NewMeterProvider()), otelffgen.WithPropagator(propagation.TraceContext{})}
		c := fftest.New(t, fftest.Config{Server: func(_ string, cfg *runtime.ServerConfig) {
			cfg.Interceptors = append(cfg.Interceptors, otelffgen.ServerInterceptor(opts...))
		}})
		serveLedger(t, c)
		client := c.Client(t, func(cfg *runtime.ClientConfig) {
			cfg.Interceptors = append(cfg.Interceptors, otelffgen.OperationInterceptor(opts...))
		})
		synctest.Wait()
		if _, err := testledger.NewClient(client).Add(t.Context(), "k", 1); err != nil {
			t.Fatal(err)
		}
		got := spans.GetSpans()
		var op tracetest.SpanStub
		servers := 0
		for _, s := range got {
			if s.SpanKind == trace.SpanKindClient {
				op = s
			}
		}
		for _, s := range got {
			if s.SpanKind == trace.SpanKindServer {
				servers++
				if s.Parent.SpanID() != op.SpanContext.SpanID() || !s.Parent.IsRemote() {
					t.Errorf("server span's parent %v, want the operation span %v", s.Parent.SpanID(), op.SpanContext.SpanID())
				}
			}
		}
		if servers != 2 || len(got) != 3 {
			t.Errorf("spans:\n%s want one operation span and two server spans", Render(got))
		}
	})
}
