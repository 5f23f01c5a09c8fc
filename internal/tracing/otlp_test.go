package tracing

import (
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The hand-written encoding decodes with the official OTLP types to what the span
// says: ids, parent and its remoteness, kind, times, every attribute type, events,
// links, status; spans grouped by resource and scope.
func TestEncodeRequestDecodesWithTheOTLPTypes(t *testing.T) {
	ts, _ := trace.ParseTraceState("k=v")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{3}, Remote: true})
	res := resource.NewSchemaless(attribute.String("service.name", "svc"))
	start := time.Unix(100, 5)
	stub := tracetest.SpanStub{
		Name: "process q", SpanContext: sc, Parent: parent, SpanKind: trace.SpanKindConsumer,
		StartTime: start, EndTime: start.Add(time.Second),
		Attributes: []attribute.KeyValue{attribute.String("s", "x"), attribute.Int64("i", -7), attribute.Bool("b", true),
			attribute.Float64("f", 1.5), attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1}),
			attribute.BoolSlice("bs", []bool{false}), attribute.Float64Slice("fs", []float64{math.Pi})},
		Events:               []sdktrace.Event{{Name: "exception", Time: start, Attributes: []attribute.KeyValue{attribute.String("exception.message", "boom")}}},
		Links:                []sdktrace.Link{{SpanContext: parent, Attributes: []attribute.KeyValue{attribute.Int("n", 1)}}},
		Status:               sdktrace.Status{Code: codes.Error, Description: "boom"},
		Resource:             res,
		InstrumentationScope: instrumentation.Scope{Name: "a", Version: "1"},
	}
	other := stub
	other.InstrumentationScope = instrumentation.Scope{Name: "b"}
	other.Parent = trace.SpanContext{}
	spans := tracetest.SpanStubs{stub, other, stub}.Snapshots()

	var m collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(encodeRequest(spans), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.ResourceSpans) != 1 || len(m.ResourceSpans[0].ScopeSpans) != 2 {
		t.Fatalf("want 1 resource with 2 scopes: %v", &m)
	}
	rs := m.ResourceSpans[0]
	if a := rs.Resource.Attributes; len(a) != 1 || a[0].Key != "service.name" || a[0].Value.GetStringValue() != "svc" {
		t.Errorf("resource %v", rs.Resource)
	}
	ssA, ssB := rs.ScopeSpans[0], rs.ScopeSpans[1]
	if ssA.Scope.Name != "a" || ssA.Scope.Version != "1" || len(ssA.Spans) != 2 || ssB.Scope.Name != "b" || len(ssB.Spans) != 1 {
		t.Fatalf("scopes %v", rs.ScopeSpans)
	}
	s := ssA.Spans[0]
	tid, sid, pid := sc.TraceID(), sc.SpanID(), parent.SpanID()
	if string(s.TraceId) != string(tid[:]) || string(s.SpanId) != string(sid[:]) || string(s.ParentSpanId) != string(pid[:]) ||
		s.TraceState != "k=v" || s.Name != "process q" || s.Kind != tracepb.Span_SPAN_KIND_CONSUMER ||
		s.StartTimeUnixNano != uint64(start.UnixNano()) || s.EndTimeUnixNano != uint64(start.Add(time.Second).UnixNano()) ||
		s.Flags != 0x301 {
		t.Errorf("span %v", s)
	}
	if f := ssB.Spans[0].Flags; f != 0x101 || len(ssB.Spans[0].ParentSpanId) != 0 {
		t.Errorf("root span flags %#x parent %x; want 0x101 and none", f, ssB.Spans[0].ParentSpanId)
	}
	got := map[string]string{}
	for _, kv := range s.Attributes {
		got[kv.Key] = kv.Value.String()
	}
	for _, kv := range stub.Attributes {
		if got[string(kv.Key)] == "" {
			t.Errorf("attribute %s missing", kv.Key)
		}
	}
	want := map[string]func(*tracepb.Span) bool{
		"i": func(s *tracepb.Span) bool { return val(s, "i").GetIntValue() == -7 },
		"b": func(s *tracepb.Span) bool { return val(s, "b").GetBoolValue() },
		"f": func(s *tracepb.Span) bool { return val(s, "f").GetDoubleValue() == 1.5 },
		"ss": func(s *tracepb.Span) bool {
			v := val(s, "ss").GetArrayValue().GetValues()
			return len(v) == 2 && v[1].GetStringValue() == "b"
		},
		"fs": func(s *tracepb.Span) bool {
			return val(s, "fs").GetArrayValue().GetValues()[0].GetDoubleValue() == math.Pi
		},
	}
	for k, ok := range want {
		if !ok(s) {
			t.Errorf("attribute %s decoded as %v", k, val(s, k))
		}
	}
	if len(s.Events) != 1 || s.Events[0].Name != "exception" || s.Events[0].Attributes[0].Value.GetStringValue() != "boom" ||
		s.Events[0].TimeUnixNano != uint64(start.UnixNano()) {
		t.Errorf("events %v", s.Events)
	}
	if len(s.Links) != 1 || string(s.Links[0].SpanId) != string(pid[:]) || s.Links[0].Attributes[0].Value.GetIntValue() != 1 {
		t.Errorf("links %v", s.Links)
	}
	if s.Status.Code != tracepb.Status_STATUS_CODE_ERROR || s.Status.Message != "boom" {
		t.Errorf("status %v", s.Status)
	}
}

func val(s *tracepb.Span, k string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value
		}
	}
	return nil
}
