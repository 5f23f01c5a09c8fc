package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// A span context in ctx goes with every task of Enqueue and EnqueueMany (delayed ones
// and batches of several queues too), as W3C traceparent and tracestate fields; without
// one, and with an invalid one, the task hash has no trace field at all.
func TestEnqueueStoresTheProducerTraceContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	rdb := srv.Client(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ts, err := trace.ParseTraceState("a=1,b=2")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, TraceState: ts})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	want := "00-01020300000000000000000000000000-0405000000000000-01"
	fields := func(q, id string) map[string]string {
		return rdb.HGetAll(context.Background(), prefix+":{"+q+"}:t:"+id).Val()
	}

	id, _, err := c.Enqueue(traced, client.Task{Queue: "q", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	if h := fields("q", id); h["traceparent"] != want || h["tracestate"] != "a=1,b=2" || h["status"] != "queued" {
		t.Errorf("Enqueue: hash %v; want traceparent %s, tracestate a=1,b=2", h, want)
	}
	rs, err := c.EnqueueMany(traced, []client.Task{{Queue: "q", Function: "noop"}, {Queue: "r", Function: "noop"},
		{Queue: "q", Function: "noop", Delay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range []string{"q", "r", "q"} {
		if h := fields(q, rs[i].ID); rs[i].Err != nil || h["traceparent"] != want || h["tracestate"] != "a=1,b=2" {
			t.Errorf("EnqueueMany task %d: %v, hash %v; want the trace fields", i, rs[i].Err, h)
		}
	}

	// No tracestate: traceparent alone.
	bare := trace.ContextWithSpanContext(context.Background(), sc.WithTraceState(trace.TraceState{}))
	id, _, err = c.Enqueue(bare, client.Task{Queue: "q", Function: "noop"})
	if h := fields("q", id); err != nil || h["traceparent"] != want {
		t.Errorf("no tracestate: %v, hash %v", err, h)
	} else if _, ok := h["tracestate"]; ok {
		t.Errorf("no tracestate: hash has an empty tracestate field")
	}

	invalid := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{SpanID: trace.SpanID{1}}))
	for name, ctx := range map[string]context.Context{"untraced": context.Background(), "invalid span context": invalid} {
		id, _, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop"})
		rs, err2 := c.EnqueueMany(ctx, []client.Task{{Queue: "q", Function: "noop"}})
		if err != nil || err2 != nil {
			t.Fatal(err, err2)
		}
		for _, id := range []string{id, rs[0].ID} {
			for k := range fields("q", id) {
				if strings.HasPrefix(k, "trace") {
					t.Errorf("%s: task %s has field %s", name, id, k)
				}
			}
		}
	}
}
