package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
)

// otlpReceiver is an OTLP/HTTP trace receiver: POST /v1/traces with a protobuf
// ExportTraceServiceRequest, as a collector accepts it.
type otlpReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	service  []string // service.name of each resource received
	requests int
	bad      []string // requests that were not OTLP/HTTP protobuf
	auth     []string // the Authorization header of each request
	gzipped  int      // requests with Content-Encoding gzip
}

func newReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var in io.Reader = req.Body
		gz := req.Header.Get("Content-Encoding") == "gzip"
		if gz {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			in = zr
		}
		body, err := io.ReadAll(in)
		var m collectorpb.ExportTraceServiceRequest
		r.mu.Lock()
		defer r.mu.Unlock()
		r.requests++
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		if gz {
			r.gzipped++
		}
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || err != nil || proto.Unmarshal(body, &m) != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range m.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					r.service = append(r.service, a.Value.GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// ofTask returns the spans received for task id, by attempt.
func (r *otlpReceiver) ofTask(id string) map[int64]*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]*tracepb.Span{}
	for _, s := range r.spans {
		if attr(s.Attributes, "messaging.message.id").GetStringValue() == id {
			out[attr(s.Attributes, "dtq.task.attempt").GetIntValue()] = s
		}
	}
	return out
}

func attr(as []*commonpb.KeyValue, k string) *commonpb.AnyValue {
	for _, a := range as {
		if a.Key == k {
			return a.Value
		}
	}
	return nil
}

// traceEnv is the environment of a traced worker exporting to r: short batch delay, so
// spans arrive while the test waits, and short retry and reclaim intervals.
func traceEnv(srv *redistest.Server, prefix string, r *otlpReceiver) []string {
	return []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix, "PORT=0",
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=" + r.srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=20", "OTEL_SERVICE_NAME=trace-test",
		"DTQ_RETRY_BASE_MS=10", "DTQ_RETRY_MAX_MS=10", "DTQ_SCHEDULER_INTERVAL_S=0.05",
		"DTQ_VISIBILITY_TIMEOUT_S=1", "DTQ_HEARTBEAT_INTERVAL_S=0.2", "DTQ_SCHEDULER_LOCK_TTL_MS=1000"}
}

// producer returns a context carrying a sampled producer span, as an application
// traced by any OTel SDK has when it enqueues, and that span's context.
func producer(t *testing.T) (context.Context, trace.SpanContext) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "send", trace.WithSpanKind(trace.SpanKindProducer))
	t.Cleanup(func() { span.End() })
	return ctx, span.SpanContext()
}

// checkChild fails unless s continues the producer's trace as its child.
func checkChild(t *testing.T, s *tracepb.Span, p trace.SpanContext) {
	t.Helper()
	tid, sid := p.TraceID(), p.SpanID()
	if !bytes.Equal(s.TraceId, tid[:]) || !bytes.Equal(s.ParentSpanId, sid[:]) {
		t.Fatalf("span trace %x parent %x; want the producer's trace %s and span %s as parent",
			s.TraceId, s.ParentSpanId, p.TraceID(), p.SpanID())
	}
}

// A traced producer's task: the worker's span is a CONSUMER span named after the queue,
// child of the producer span (one trace id), with the messaging attributes, exported
// over OTLP/HTTP protobuf. The task hash holds the producer's traceparent and tracestate.
func TestTraceProducerIsParentOfTheAttempt(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	r := newReceiver(t)
	w := startWorker(t, traceEnv(srv, prefix, r), "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20tok-1,x-other=2")
	rdb := srv.Client(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx, psc := producer(t)
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	psc = psc.WithTraceState(ts)
	ctx = trace.ContextWithSpanContext(ctx, psc)
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "echo", Priority: 3, Payload: []byte("hi")})
	if err != nil {
		t.Fatal(err)
	}
	var spans map[int64]*tracepb.Span
	eventually(t, "the attempt's span", func() bool { spans = r.ofTask(id); return len(spans) == 1 })
	s := spans[1]
	checkChild(t, s, psc)
	if s.Kind != tracepb.Span_SPAN_KIND_CONSUMER || s.Name != "process default" {
		t.Errorf("span kind %v name %q; want CONSUMER \"process default\"", s.Kind, s.Name)
	}
	for k, want := range map[string]string{"messaging.system": "dtq", "messaging.destination.name": "default",
		"messaging.operation.type": "process", "messaging.operation.name": "process",
		"dtq.task.function": "echo", "dtq.task.outcome": "succeeded"} {
		if got := attr(s.Attributes, k).GetStringValue(); got != want {
			t.Errorf("attribute %s = %q, want %q", k, got, want)
		}
	}
	if attr(s.Attributes, "dtq.task.priority").GetIntValue() != 3 || s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("priority %v status %v; want 3 and no error", attr(s.Attributes, "dtq.task.priority"), s.Status)
	}
	if s.TraceState != "vendor=abc" {
		t.Errorf("tracestate %q, want vendor=abc", s.TraceState)
	}
	h := rdb.HGetAll(context.Background(), prefix+":{default}:t:"+id).Val()
	if want := "00-" + psc.TraceID().String() + "-" + psc.SpanID().String() + "-01"; h["traceparent"] != want || h["tracestate"] != "vendor=abc" {
		t.Errorf("task hash traceparent %q tracestate %q; want %q and vendor=abc", h["traceparent"], h["tracestate"], want)
	}
	w.stop(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) > 0 || len(r.service) == 0 || r.service[0] != "trace-test" {
		t.Errorf("bad requests %v, service names %v; want none and trace-test", r.bad, r.service)
	}
	if len(r.auth) == 0 || r.auth[0] != "Bearer tok-1" || r.gzipped != 0 {
		t.Errorf("authorization headers %q, %d gzipped; want the configured header, uncompressed", r.auth, r.gzipped)
	}
	if strings.Contains(w.output.String(), "tok-1") {
		t.Errorf("the worker's output shows the header's value:\n%s", w.output.String())
	}
}

// A failed attempt and its retry are two spans of one trace, both children of the
// producer span; the failed one has error status and an exception event, and each
// says its outcome.
func TestTraceRetryIsASecondSpanOfTheTrace(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	r := newReceiver(t)
	startWorker(t, traceEnv(srv, prefix, r), "OTEL_EXPORTER_OTLP_COMPRESSION=gzip")
	c := client.New(srv.Client(t), client.Options{Prefix: prefix})
	ctx, psc := producer(t)
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "fail", Payload: []byte(`{"times":1}`), MaxRetries: client.Retries(3)})
	if err != nil {
		t.Fatal(err)
	}
	var spans map[int64]*tracepb.Span
	eventually(t, "two attempt spans", func() bool { spans = r.ofTask(id); return len(spans) == 2 })
	for a, want := range map[int64]string{1: "retry", 2: "succeeded"} {
		s := spans[a]
		if s == nil {
			t.Fatalf("no span of attempt %d: %v", a, spans)
		}
		checkChild(t, s, psc)
		if got := attr(s.Attributes, "dtq.task.outcome").GetStringValue(); got != want {
			t.Errorf("attempt %d outcome %q, want %q", a, got, want)
		}
	}
	f := spans[1]
	if f.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(f.Status.GetMessage(), "planned failure") ||
		len(f.Events) != 1 || f.Events[0].Name != "exception" || !strings.Contains(attr(f.Events[0].Attributes, "exception.message").GetStringValue(), "planned failure") {
		t.Errorf("failed attempt: status %v events %v; want error status and an exception event", f.Status, f.Events)
	}
	if bytes.Equal(spans[1].SpanId, spans[2].SpanId) {
		t.Error("both attempts have one span id")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gzipped != r.requests || len(r.bad) > 0 {
		t.Errorf("%d of %d requests gzipped, bad %v; want all, none bad", r.gzipped, r.requests, r.bad)
	}
}

// A worker SIGKILLed mid-attempt exports nothing for it; the attempt a peer reclaims
// is a span of the same trace, child of the producer span, marked reclaimed.
func TestTraceSurvivesWorkerKill(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	r := newReceiver(t)
	env := traceEnv(srv, prefix, r)
	victim := startWorker(t, env, "DTQ_WORKER_ID=victim")
	rdb := srv.Client(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx, psc := producer(t)
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "sleep", Payload: []byte(`{"ms":1500}`), MaxRetries: client.Retries(3)})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the victim running the task", func() bool {
		h := rdb.HMGet(context.Background(), prefix+":{default}:t:"+id, "status", "worker").Val()
		return h[0] == "running" && h[1] == "victim"
	})
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	startWorker(t, env, "DTQ_WORKER_ID=peer")
	var spans map[int64]*tracepb.Span
	eventually(t, "the reclaimed attempt's span", func() bool { spans = r.ofTask(id); return spans[2] != nil })
	s := spans[2]
	checkChild(t, s, psc)
	if !attr(s.Attributes, "dtq.task.reclaimed").GetBoolValue() || attr(s.Attributes, "dtq.task.outcome").GetStringValue() != "succeeded" {
		t.Errorf("reclaimed attempt attributes %v; want reclaimed and succeeded", s.Attributes)
	}
	if spans[1] != nil {
		t.Errorf("the killed attempt's span was exported: %v", spans[1])
	}
}

// The drain flushes the spans still buffered: with a batch delay of ten minutes, the
// span of a finished task reaches the receiver by the time the worker has exited.
func TestTraceDrainFlushesSpans(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	r := newReceiver(t)
	w := startWorker(t, traceEnv(srv, prefix, r), "OTEL_BSP_SCHEDULE_DELAY=600000")
	c := client.New(srv.Client(t), client.Options{Prefix: prefix})
	ctx, psc := producer(t)
	id, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the task done", func() bool {
		ti, _ := c.Get(context.Background(), "default", id)
		return ti != nil && ti.Status == "succeeded"
	})
	w.stop(t)
	s := r.ofTask(id)[1]
	if s == nil {
		t.Fatal("the span of a finished task was not exported by the time the worker exited")
	}
	checkChild(t, s, psc)
}

// Tracing off (OTEL_TRACES_EXPORTER unset, though an endpoint is set): the worker
// exports nothing, not even for a task whose producer was traced; an untraced
// enqueue writes no trace fields.
func TestTraceOffExportsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	r := newReceiver(t)
	w := startWorker(t, []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix, "PORT=0",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.srv.URL, "OTEL_BSP_SCHEDULE_DELAY=20"})
	rdb := srv.Client(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx, _ := producer(t)
	traced, _, err := c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := c.Enqueue(context.Background(), client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both tasks done", func() bool {
		a, _ := c.Get(context.Background(), "default", traced)
		b, _ := c.Get(context.Background(), "default", plain)
		return a != nil && b != nil && a.Status == "succeeded" && b.Status == "succeeded"
	})
	w.stop(t) // a tracing worker flushes at exit: nothing may be left to send
	r.mu.Lock()
	n := r.requests
	r.mu.Unlock()
	if n != 0 {
		t.Errorf("the receiver got %d requests from a worker with tracing off", n)
	}
	h := rdb.HGetAll(context.Background(), prefix+":{default}:t:"+plain).Val()
	if _, ok := h["traceparent"]; ok || h["status"] != "succeeded" {
		t.Errorf("untraced task hash %v; want no traceparent", h)
	}
	if _, ok := h["tracestate"]; ok {
		t.Errorf("untraced task hash has tracestate")
	}
}

// dtq enqueue takes the producer's trace context from --traceparent or TRACEPARENT (and
// --tracestate or TRACESTATE); a malformed one exits 2 and creates nothing.
func TestEnqueueTraceparentFlagAndEnv(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	prefix := redistest.Prefix(t)
	rdb := srv.Client(t)
	env := []string{"DTQ_REDIS_URL=" + srv.URL(), "DTQ_KEY_PREFIX=" + prefix}
	tp := "00-" + strings.Repeat("ab", 16) + "-" + strings.Repeat("cd", 8) + "-01"
	field := func(id, f string) string {
		return rdb.HGet(context.Background(), prefix+":{default}:t:"+id, f).Val()
	}
	out, errOut, code := dtq(t, env, "enqueue", "--function", "noop", "--traceparent", tp, "--tracestate", "k=v")
	id := strings.TrimSpace(out)
	if code != 0 || field(id, "traceparent") != tp || field(id, "tracestate") != "k=v" {
		t.Fatalf("--traceparent: exit %d err %q, stored %q %q", code, errOut, field(id, "traceparent"), field(id, "tracestate"))
	}
	out, _, code = dtq(t, append(env, "TRACEPARENT="+tp), "enqueue", "--function", "noop")
	if id := strings.TrimSpace(out); code != 0 || field(id, "traceparent") != tp {
		t.Fatalf("TRACEPARENT: exit %d, stored %q", code, field(id, "traceparent"))
	}
	tasks := func() int { return len(rdb.Keys(context.Background(), prefix+":{default}:t:*").Val()) }
	other := "00-" + strings.Repeat("ef", 16) + "-" + strings.Repeat("01", 8) + "-00"
	out, _, code = dtq(t, append(env, "TRACEPARENT=garbage"), "enqueue", "--function", "noop", "--traceparent", other)
	if id := strings.TrimSpace(out); code != 0 || field(id, "traceparent") != other {
		t.Fatalf("--traceparent over TRACEPARENT: exit %d, stored %q", code, field(id, "traceparent"))
	}
	if _, errOut, code := dtq(t, append(env, "TRACEPARENT=garbage"), "enqueue", "--function", "noop"); code != 2 || !strings.Contains(errOut, "TRACEPARENT") {
		t.Errorf("a malformed TRACEPARENT: exit %d stderr %q; want 2 naming it", code, errOut)
	}
	before := tasks()
	for _, args := range [][]string{
		{"--traceparent", "00-zz-cd-01"},
		{"--traceparent", "00-" + strings.Repeat("0", 32) + "-" + strings.Repeat("cd", 8) + "-01"}, // all-zero trace id
		{"--tracestate", "k=v"}, // without a traceparent
		{"--traceparent", tp, "--tracestate", "not a list"},
	} {
		_, errOut, code := dtq(t, env, append([]string{"enqueue", "--function", "noop"}, args...)...)
		if code != 2 || !strings.Contains(errOut, "trace") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d stderr %q; want 2 and one line about the trace context", args, code, errOut)
		}
	}
	if after := tasks(); after != before {
		t.Errorf("a refused enqueue created tasks: %d → %d", before, after)
	}
}

// A bad OTEL_* value exits 2 with one line naming the variable, and never shows a
// header's value (it may be a secret).
func TestWorkerBadTraceEnvExits2(t *testing.T) {
	t.Parallel()
	secret := "Bearer s3cr3t-" + hex.EncodeToString([]byte(t.Name()))[:8]
	on := "OTEL_TRACES_EXPORTER=otlp"
	for _, c := range []struct {
		env  []string
		name string
	}{
		{[]string{"OTEL_TRACES_EXPORTER=jaeger"}, "OTEL_TRACES_EXPORTER"},
		{[]string{"OTEL_SDK_DISABLED=maybe"}, "OTEL_SDK_DISABLED"},
		{[]string{on, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{[]string{on, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=localhost:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{[]string{on, "OTEL_EXPORTER_OTLP_HEADERS=authorization " + secret}, "OTEL_EXPORTER_OTLP_HEADERS"},
		{[]string{on, "OTEL_EXPORTER_OTLP_TRACES_HEADERS=a=%zz" + secret}, "OTEL_EXPORTER_OTLP_TRACES_HEADERS"},
		{[]string{on, "OTEL_EXPORTER_OTLP_TIMEOUT=forever"}, "OTEL_EXPORTER_OTLP_TIMEOUT"},
		{[]string{on, "OTEL_TRACES_SAMPLER=sometimes"}, "OTEL_TRACES_SAMPLER"},
		{[]string{on, "OTEL_TRACES_SAMPLER=traceidratio", "OTEL_TRACES_SAMPLER_ARG=2"}, "OTEL_TRACES_SAMPLER_ARG"},
		{[]string{on, "OTEL_EXPORTER_OTLP_COMPRESSION=zstd"}, "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{[]string{on, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=/nonexistent/ca.pem"}, "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"},
	} {
		out, errOut, code := dtq(t, c.env, "worker")
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], c.name) || out != "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming %s", c.env, code, errOut, c.name)
		}
		if strings.Contains(errOut, "s3cr3t") {
			t.Errorf("%v: stderr shows the header value: %q", c.env, errOut)
		}
	}
}
