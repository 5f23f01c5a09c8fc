package runtime

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// tracer runs each attempt in a consumer span (Options.Tracer). The span continues the
// producer's trace as its child: the traceparent the client stored with the task at
// enqueue (fields traceparent, tracestate) is read when the attempt starts, one
// pipelined HMGET per batch of started tasks. With tracing off (nil *tracer) nothing is
// read and no span is made.
//
// Each attempt is a span of its own: a retry, a reclaim after a worker died and a run
// after a hand-back are further children of the same producer span, told apart by
// dtq.task.attempt. A task enqueued without a trace context gets a root span.
type tracer struct {
	t trace.Tracer
}

// traceLoadTimeout bounds the read of the started tasks' trace contexts: a slow read
// delays the start of the functions, so past it they start without a parent.
const traceLoadTimeout = 2 * time.Second

func newTracer(tp trace.TracerProvider) *tracer {
	if tp == nil {
		return nil
	}
	return &tracer{t: tp.Tracer("github.com/dtq/dtq/runtime")}
}

// load reads the trace context (traceparent, tracestate) of each started task, in the
// order of started; nil when tracing is off. A failed read leaves them empty: the
// attempts run in root spans, and the failure is logged at debug level.
func (tr *tracer) load(w *Worker, q keys.Queue, started []lua.Started) [][2]string {
	if tr == nil || len(started) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceLoadTimeout)
	defer cancel()
	p := w.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(started))
	for i, s := range started {
		cmds[i] = p.HMGet(ctx, q.Task(s.ID), "traceparent", "tracestate")
	}
	out := make([][2]string, len(started))
	if _, err := p.Exec(ctx); err != nil {
		w.log.Debug("tracing: reading the tasks' trace context failed", "queue", q.Name, "err", err)
	}
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil || len(v) != 2 {
			continue
		}
		out[i][0], _ = v[0].(string)
		out[i][1], _ = v[1].(string)
	}
	return out
}

// begin starts e's span under the producer's span context and returns parent carrying
// it (the function's context derives from it) and the func that ends the span with the
// attempt's outcome.
func (tr *tracer) begin(parent context.Context, e *execution) (context.Context, func()) {
	t := &e.task
	pctx := parent
	if e.traceparent != "" {
		c := propagation.MapCarrier{"traceparent": e.traceparent}
		if e.tracestate != "" {
			c["tracestate"] = e.tracestate
		}
		if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c)); sc.IsValid() {
			pctx = trace.ContextWithRemoteSpanContext(parent, sc)
		}
	}
	ctx, span := tr.t.Start(pctx, "process "+t.Queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "dtq"),
			attribute.String("messaging.destination.name", t.Queue),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.message.id", t.ID),
			attribute.String("messaging.consumer.group.name", keys.Group),
			attribute.Int64("dtq.task.attempt", t.Attempt),
			attribute.Int("dtq.task.priority", t.Priority),
			attribute.String("dtq.task.function", t.Function),
			attribute.Bool("dtq.task.reclaimed", t.Reclaimed),
		))
	return ctx, func() {
		outcome := "handed_back" // cancelled by the drain deadline: the entry goes back
		switch e.outcome {
		case lua.Succeeded:
			outcome = "succeeded"
		case lua.Retry:
			outcome = "retry"
		case lua.Dead:
			outcome = "dead"
		}
		span.SetAttributes(attribute.String("dtq.task.outcome", outcome))
		if e.reason != "" {
			span.SetAttributes(attribute.String("dtq.task.reason", e.reason))
		}
		if e.outcome == lua.Retry || e.outcome == lua.Dead {
			span.SetAttributes(attribute.String("error.type", errorType(e)))
			span.AddEvent("exception", trace.WithAttributes(
				attribute.String("exception.type", errorType(e)),
				attribute.String("exception.message", e.text)))
			span.SetStatus(codes.Error, e.text)
		}
		span.End()
	}
}

// errorType names the kind of failure for error.type: the reason of the outcome
// ("failed": the function failed, timed out or is not registered; "lost": the worker
// running the previous attempt died with no retries left).
func errorType(e *execution) string {
	if e.reason != "" {
		return e.reason
	}
	return "_OTHER"
}
