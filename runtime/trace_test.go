package runtime_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/tracing"
	"github.com/dtq/dtq/runtime"
)

// startTraced runs a worker whose Options.Tracer is tp.
func startTraced(t testing.TB, rdb redis.UniversalClient, cfg runtime.Config, reg *runtime.Registry, tp trace.TracerProvider) func() {
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: reg, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// The function's context carries the attempt's span: a span the function starts is its
// child, and the attempt's span is the producer's child.
func TestTraceFunctionContextCarriesTheSpan(t *testing.T) {
	t.Parallel()
	e := setup(t)
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem))
	reg := function.Registry()
	reg.Register("traced", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("user").Start(ctx, "user work")
		span.End()
		return nil, nil
	}, runtime.FuncOptions{})
	startTraced(t, e.rdb, e.config(t), reg, tp)
	pctx, producer := tp.Tracer("test").Start(context.Background(), "send", trace.WithSpanKind(trace.SpanKindProducer))
	id, _, err := e.c.Enqueue(pctx, client.Task{Queue: "default", Function: "traced"})
	if err != nil {
		t.Fatal(err)
	}
	var user, attempt sdktrace.ReadOnlySpan
	eventually(t, "the function's span and the attempt's", func() bool {
		user, attempt = nil, nil
		for _, s := range mem.GetSpans().Snapshots() {
			switch s.Name() {
			case "user work":
				user = s
			case "process default":
				attempt = s
			}
		}
		return user != nil && attempt != nil
	})
	if attempt.Parent().SpanID() != producer.SpanContext().SpanID() || !attempt.Parent().IsRemote() ||
		attempt.SpanContext().TraceID() != producer.SpanContext().TraceID() {
		t.Errorf("attempt span parent %v, want the producer span %v", attempt.Parent(), producer.SpanContext())
	}
	if user.Parent().SpanID() != attempt.SpanContext().SpanID() {
		t.Errorf("the function's span has parent %v, want the attempt span %v", user.Parent().SpanID(), attempt.SpanContext().SpanID())
	}
	for _, a := range attempt.Attributes() {
		if a.Key == "messaging.message.id" && a.Value.AsString() != id {
			t.Errorf("message id %q, want %s", a.Value.AsString(), id)
		}
	}
}

// BenchmarkWorkerNoopTraced is BenchmarkWorkerNoop with tracing on: every task enqueued
// under a producer span, and the worker exporting a span per task over OTLP/HTTP to a
// local sink (which reads and drops each request). Compare its ns/op with
// BenchmarkWorkerNoop's for the cost of tracing per task.
func BenchmarkWorkerNoopTraced(b *testing.B) {
	e := setupB(b)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	exp := tracing.NewExporter(tracing.ExporterConfig{URL: sink.URL + "/v1/traces"})
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, span := tp.Tracer("bench").Start(context.Background(), "send")
	defer span.End()
	var tasks []client.Task
	for i := 0; i < b.N; i++ {
		tasks = append(tasks, client.Task{Queue: "default", Function: "noop"})
	}
	for lo := 0; lo < len(tasks); lo += 1000 {
		if _, err := e.c.EnqueueMany(ctx, tasks[lo:min(lo+1000, len(tasks))]); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": e.srv.URL(), "DTQ_KEY_PREFIX": e.prefix, "DTQ_WORKER_CONCURRENCY": "64", "DTQ_LOG_LEVEL": "error"}))
	if err != nil {
		b.Fatal(err)
	}
	q := keys.New(e.prefix).Queue("default")
	b.ResetTimer()
	stop := startTraced(b, e.rdb, cfg, function.Registry(), tp)
	for {
		n, err := e.rdb.XLen(context.Background(), q.Stream(0)).Result()
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		waitTick()
	}
	b.StopTimer()
	stop()
}
