package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/internal/tracing"
)

// traceFlags adds --traceparent and --tracestate to fs; the returned func gives their
// values once fs is parsed. A flag not given falls back to the TRACEPARENT or
// TRACESTATE variable (the convention for passing a W3C trace context to a command): a
// task enqueued with one continues that trace in the worker.
func traceFlags(fs *flag.FlagSet) func() (traceparent, tracestate string) {
	tp := fs.String("traceparent", "", "W3C traceparent of the producer's span, stored with the task (default: $TRACEPARENT)")
	ts := fs.String("tracestate", "", "W3C tracestate to go with --traceparent (default: $TRACESTATE)")
	return func() (string, string) {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		traceparent, tracestate := *tp, *ts
		if !set["traceparent"] {
			traceparent = os.Getenv("TRACEPARENT")
		}
		if !set["tracestate"] {
			tracestate = os.Getenv("TRACESTATE")
		}
		return traceparent, tracestate
	}
}

// withTraceparent returns ctx carrying the remote span context that traceparent and
// tracestate name ("" traceparent: ctx unchanged). One that is not a valid W3C
// traceparent is an error: it would otherwise be dropped without a word.
func withTraceparent(ctx context.Context, traceparent, tracestate string) (context.Context, error) {
	if traceparent == "" {
		if tracestate != "" {
			return nil, errors.New("--tracestate needs --traceparent (or TRACEPARENT)")
		}
		return ctx, nil
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	out := propagation.TraceContext{}.Extract(ctx, c)
	sc := trace.SpanContextFromContext(out)
	if !sc.IsValid() {
		return nil, errors.New("--traceparent (or TRACEPARENT) is not a valid W3C traceparent: want 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>")
	}
	if tracestate != "" && sc.TraceState().Len() == 0 {
		return nil, errors.New("--tracestate (or TRACESTATE) is not a valid W3C tracestate: want key=value pairs separated by commas")
	}
	return out, nil
}

// workerTracing sets up the worker's tracing from the OTEL_* variables (internal/tracing):
// the TracerProvider for runtime.Options.Tracer (nil: off) and the flush to run at exit.
func workerTracing(log *slog.Logger) (trace.TracerProvider, func(), error) {
	p, err := tracing.FromEnv(context.Background(), os.LookupEnv, log)
	if err != nil || p == nil {
		return nil, func() {}, err
	}
	return p.TracerProvider(), func() {
		if err := p.Shutdown(context.Background()); err != nil {
			log.Warn("tracing: spans not flushed at exit", "err", err)
		}
	}, nil
}
