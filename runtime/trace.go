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
// enqueue (fields traceparent, tracestate) is read when the attempts are started, one
// pipelined HMGET per batch of started tasks, beside the poller. With tracing off (nil *tracer) nothing is
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

// traceRead is the read of the trace contexts (traceparent, tracestate) of one batch
// of started tasks, in their order; ctx is closed once it has returned.
type traceRead struct {
	done chan struct{}
	ctx  [][2]string
}

// load starts the read of the trace context of each started task, one pipelined
// HMGET, on a goroutine of its own: the poller goes on at once, and each execution
// waits for the read before its span starts. Nil when tracing is off. A failed read
// leaves them empty: the attempts run in root spans, and the failure is logged at
// debug level.
func (tr *tracer) load(w *Worker, q keys.Queue, started []lua.Started) *traceRead {
	if tr == nil || len(started) == 0 {
		return nil
	}
	r := &traceRead{done: make(chan struct{}), ctx: make([][2]string, len(started))}
	p := w.rdb.Pipeline()
	ctx, cancel := context.WithTimeout(context.Background(), traceLoadTimeout)
	cmds := make([]*redis.SliceCmd, len(started))
	for i, s := range started {
		cmds[i] = p.HMGet(ctx, q.Task(s.ID), "traceparent", "tracestate")
	}
	go func() {
		defer close(r.done)
		defer cancel()
		if _, err := p.Exec(ctx); err != nil {
			w.log.Debug("tracing: reading the tasks' trace context failed", "queue", q.Name, "err", err)
		}
		for i, c := range cmds {
			v, err := c.Result()
			if err != nil || len(v) != 2 {
				continue
			}
			r.ctx[i][0], _ = v[0].(string)
			r.ctx[i][1], _ = v[1].(string)
		}
	}()
	return r
}

// begin starts e's span under the producer's span context and returns parent carrying
// it (the function's context derives from it) and the func that ends the span with the
// attempt's outcome.
func (tr *tracer) begin(parent context.Context, e *execution) (context.Context, func()) {
	t := &e.task
	pctx := parent
	var tp, ts string
	if e.trace != nil {
		<-e.trace.done
		tp, ts = e.trace.ctx[e.traceIdx][0], e.trace.ctx[e.traceIdx][1]
	}
	if tp != "" {
		c := propagation.MapCarrier{"traceparent": tp}
		if ts != "" {
			c["tracestate"] = ts
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
		case lua.Cancelled:
			outcome = "cancelled"
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
