// Package otelffgen traces and measures ffgen calls with OpenTelemetry,
// built only on the runtime's interceptors and call metadata:
//
//   - OperationInterceptor: one client span per operation, named
//     "service/method", and the ffgen.client.operations counter and
//     ffgen.client.operation.duration histogram;
//   - AttemptInterceptor: a child span per attempt with the node, failure
//     group, attempt number and the reason of the failover that led to it,
//     the ffgen.client.attempts and ffgen.client.failovers counters, and
//     the attempt's span context injected into its metadata;
//   - ServerInterceptor: the server span, a child of the attempt span
//     across the wire, and the ffgen.server.handled counter and
//     ffgen.server.duration histogram.
//
// It is a module of its own so that the core library does not depend on
// OpenTelemetry. Without options it uses the global providers and
// propagator (otel.GetTracerProvider, otel.GetMeterProvider,
// otel.GetTextMapPropagator).
package otelffgen

import (
	"context"
	"encoding/hex"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ffgen/ffgen/runtime"
	"github.com/ffgen/ffgen/runtime/codec"
	"github.com/ffgen/ffgen/runtime/metadata"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/ffgen/ffgen/runtime/otelffgen"

// Attribute keys besides the rpc.* semantic conventions.
const (
	AttrOpID           = attribute.Key("ffgen.op_id")
	AttrAttempt        = attribute.Key("ffgen.attempt.number")
	AttrNode           = attribute.Key("ffgen.node")
	AttrGroup          = attribute.Key("ffgen.group")
	AttrFailoverReason = attribute.Key("ffgen.failover_reason") // why the previous attempt ended
	AttrEndReason      = attribute.Key("ffgen.attempt.end_reason")
	AttrHedged         = attribute.Key("ffgen.hedged")
	AttrCaller         = attribute.Key("ffgen.caller")
	AttrOutcome        = attribute.Key("ffgen.outcome")
)

// Option configures the interceptors.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets the tracer provider; default the global one.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider; default the global one.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagator sets how span contexts travel in metadata; default the
// global propagator.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

func newConfig(opts []Option) config {
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider(), prop: otel.GetTextMapPropagator()}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func methodAttrs(m *runtime.MethodDesc) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("rpc.system", "ffgen"),
		attribute.String("rpc.service", m.Service),
		attribute.String("rpc.method", m.Name),
	}
}

func spanName(m *runtime.MethodDesc) string { return m.Service + "/" + m.Name }

// mdCarrier lets a propagator read and write call metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// inject returns ctx with its span context added to the outgoing metadata.
func inject(ctx context.Context, prop propagation.TextMapPropagator) context.Context {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		md = metadata.MD{}
	}
	prop.Inject(ctx, mdCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// OperationInterceptor returns the client interceptor that makes the
// operation span and counts operations.
func OperationInterceptor(opts ...Option) runtime.OperationInterceptor {
	c := newConfig(opts)
	tracer := c.tp.Tracer(ScopeName)
	meter := c.mp.Meter(ScopeName)
	ops, _ := meter.Int64Counter("ffgen.client.operations", metric.WithDescription("Operations ended, by outcome."))
	dur, _ := meter.Float64Histogram("ffgen.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Operation latency, failovers included."))
	return func(ctx context.Context, m *runtime.MethodDesc, args, reply codec.Message, next runtime.Invoker) error {
		start := time.Now()
		ctx, span := tracer.Start(ctx, spanName(m), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(methodAttrs(m)...))
		defer span.End()
		// Without an attempt interceptor the server's span is a child of
		// this one; with one, each attempt replaces it with its own.
		err := next(inject(ctx, c.prop), m, args, reply)
		outcome := "ok"
		if err != nil {
			outcome = "error"
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(AttrOutcome.String(outcome))
		set := metric.WithAttributes(append(methodAttrs(m), AttrOutcome.String(outcome))...)
		ops.Add(ctx, 1, set)
		dur.Record(ctx, time.Since(start).Seconds(), set)
		return err
	}
}

// AttemptInterceptor returns the client interceptor that makes a span per
// attempt, sends its span context with the attempt, and counts attempts
// and failovers.
func AttemptInterceptor(opts ...Option) runtime.AttemptInterceptor {
	c := newConfig(opts)
	tracer := c.tp.Tracer(ScopeName)
	meter := c.mp.Meter(ScopeName)
	attempts, _ := meter.Int64Counter("ffgen.client.attempts", metric.WithDescription("Attempts ended, by the reason they ended (none: the attempt produced the outcome)."))
	failovers, _ := meter.Int64Counter("ffgen.client.failovers", metric.WithDescription("Attempts made because an earlier one failed over, by its reason."))
	return func(ctx context.Context, a *runtime.ClientAttempt, next func(context.Context) runtime.AttemptResult) runtime.AttemptResult {
		opID := AttrOpID.String(hex.EncodeToString(a.OpID[:]))
		trace.SpanFromContext(ctx).SetAttributes(opID) // the operation span learns its ID here
		attrs := append(methodAttrs(a.Method), opID,
			AttrAttempt.Int(a.Number), AttrNode.String(a.Node), AttrGroup.String(a.Group), AttrHedged.Bool(a.Hedged))
		if a.After != runtime.ReasonNone {
			attrs = append(attrs, AttrFailoverReason.String(a.After.String()))
			failovers.Add(ctx, 1, metric.WithAttributes(append(methodAttrs(a.Method), AttrFailoverReason.String(a.After.String()))...))
		}
		ctx, span := tracer.Start(ctx, spanName(a.Method)+" attempt", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		defer span.End()
		res := next(inject(ctx, c.prop))
		span.SetAttributes(AttrEndReason.String(res.Reason.String()))
		if res.Reason != runtime.ReasonNone || res.Err != nil {
			if res.Err != nil {
				span.RecordError(res.Err)
			}
			msg := res.Reason.String()
			if res.Err != nil {
				msg = res.Err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
		attempts.Add(ctx, 1, metric.WithAttributes(append(methodAttrs(a.Method), AttrEndReason.String(res.Reason.String()))...))
		return res
	}
}

// ServerInterceptor returns the server interceptor that continues the
// caller's trace from the call's metadata and makes the server span.
func ServerInterceptor(opts ...Option) runtime.ServerInterceptor {
	c := newConfig(opts)
	tracer := c.tp.Tracer(ScopeName)
	meter := c.mp.Meter(ScopeName)
	handled, _ := meter.Int64Counter("ffgen.server.handled", metric.WithDescription("Handler runs ended, by outcome."))
	dur, _ := meter.Float64Histogram("ffgen.server.duration", metric.WithUnit("s"), metric.WithDescription("How long handlers ran."))
	return func(ctx context.Context, m *runtime.MethodDesc, args codec.Message, next runtime.Handler) (codec.Message, error) {
		start := time.Now()
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = c.prop.Extract(ctx, mdCarrier(md))
		}
		attrs := methodAttrs(m)
		if a := runtime.AttemptFrom(ctx); a != nil {
			attrs = append(attrs, AttrOpID.String(a.OpIDString()), AttrAttempt.Int(a.Number), AttrCaller.String(a.Caller))
		}
		ctx, span := tracer.Start(ctx, spanName(m), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		res, err := next(ctx, args)
		outcome := "ok"
		if err != nil {
			outcome = "error"
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		set := metric.WithAttributes(append(methodAttrs(m), AttrOutcome.String(outcome))...)
		handled.Add(ctx, 1, set)
		dur.Record(ctx, time.Since(start).Seconds(), set)
		return res, err
	}
}
