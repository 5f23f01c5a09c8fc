package client

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/lua"
)

// traceContext is the W3C trace context of ctx's span (traceparent, tracestate), or
// "", "" when ctx carries no valid span context: an untraced enqueue writes nothing
// more. Only the span context is read (trace.SpanContextFromContext), whichever
// TracerProvider made it; no global propagator is consulted.
func traceContext(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// withTrace sets a's trace context from ctx.
func withTrace(ctx context.Context, a lua.EnqueueArgs) lua.EnqueueArgs {
	a.Traceparent, a.Tracestate = traceContext(ctx)
	return a
}
