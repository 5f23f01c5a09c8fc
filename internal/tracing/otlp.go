package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dtq/dtq/internal/envcfg"
)

// Exporter sends spans as OTLP/HTTP protobuf: POST of an ExportTraceServiceRequest to
// the traces endpoint. It is the worker's own, in place of the SDK's otlptracehttp: that
// one links the OTLP protobuf packages with their gRPC service stubs, gRPC itself and
// the gRPC gateway, whose package initialisers add about 1.35 ms and 1 500 allocations
// to every start of the worker (GODEBUG=inittrace=1), while this one links nothing
// that runs at start. The wire format is checked against the official OTLP types in
// the tests (a receiver decoding with go.opentelemetry.io/proto/otlp).
type Exporter struct {
	url     string
	headers map[string]string
	timeout time.Duration
	gzip    bool
	client  *http.Client
}

// ExporterConfig is where and how the exporter sends.
type ExporterConfig struct {
	URL        string // the full traces URL, e.g. http://localhost:4318/v1/traces
	Headers    map[string]string
	Timeout    time.Duration // of one export, retries included (0: 10 s)
	Gzip       bool
	RootCAs    *x509.CertPool // nil: the system's
	HTTPClient *http.Client   // nil: a client of its own
}

// NewExporter returns an exporter sending to c.URL.
func NewExporter(c ExporterConfig) *Exporter {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	hc := c.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if c.RootCAs != nil {
			tr.TLSClientConfig = &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}
		}
		hc = &http.Client{Transport: tr}
	}
	return &Exporter{url: c.URL, headers: c.Headers, timeout: c.Timeout, gzip: c.Gzip, client: hc}
}

// exporterFromEnv reads the OTEL_EXPORTER_OTLP_* variables as the OTLP exporter
// specification gives them (the TRACES_ one over the general one; a general endpoint
// gets /v1/traces appended). Check has validated their form.
func exporterFromEnv(lookup func(string) (string, bool)) (*Exporter, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	pick := func(name string) (string, string) {
		if v := get("OTEL_EXPORTER_OTLP_TRACES_" + name); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + name
		}
		return get("OTEL_EXPORTER_OTLP_" + name), "OTEL_EXPORTER_OTLP_" + name
	}
	var c ExporterConfig
	if v := get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		c.URL = v
	} else if v := get("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		c.URL = strings.TrimSuffix(v, "/") + "/v1/traces"
	} else {
		c.URL = "http://localhost:4318/v1/traces"
	}
	if v, _ := pick("TIMEOUT"); v != "" {
		n, _ := strconv.Atoi(v)
		c.Timeout = time.Duration(n) * time.Millisecond
	}
	h1, h2 := parseHeaders(get("OTEL_EXPORTER_OTLP_HEADERS")), parseHeaders(get("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
	c.Headers = h1
	for k, v := range h2 {
		c.Headers[k] = v
	}
	switch v, name := pick("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		c.Gzip = true
	default:
		return nil, envcfg.Bad(name, errors.New("must be gzip or none"))
	}
	if v, name := pick("CERTIFICATE"); v != "" {
		pem, err := os.ReadFile(v)
		if err != nil {
			return nil, envcfg.Bad(name, fmt.Errorf("cannot be read: %w", err))
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, envcfg.Bad(name, errors.New("holds no PEM certificate"))
		}
	}
	return NewExporter(c), nil
}

// parseHeaders reads key=value[,key=value…] with percent-encoded values (checkHeaders
// has checked the form).
func parseHeaders(v string) map[string]string {
	out := map[string]string{}
	if v == "" {
		return out
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		val, _ = url.PathUnescape(strings.TrimSpace(val))
		out[strings.TrimSpace(k)] = val
	}
	return out
}

// ExportSpans sends spans in one request, retrying a refusal the specification calls
// retryable (429, 502, 503, 504) or a failed connection until the timeout. Its errors
// name the status, never a header.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body := encodeRequest(spans)
	if e.gzip {
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = zb.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		retry, err := e.send(ctx, body)
		if err == nil || !retry {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("otlp export: %w (last: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (e *Exporter) send(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("otlp export: bad endpoint URL")
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return true, fmt.Errorf("otlp export: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == 429 || resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504:
		return true, fmt.Errorf("otlp export: HTTP %d", resp.StatusCode)
	default:
		return false, fmt.Errorf("otlp export: HTTP %d", resp.StatusCode)
	}
}

// Shutdown ends the exporter: idle connections are closed.
func (e *Exporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// The field numbers of the OTLP protobuf messages (opentelemetry-proto,
// collector/trace/v1 and trace/v1, common/v1, resource/v1).
const (
	fReqResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fRSResource   = 1 // ResourceSpans
	fRSScopeSpans = 2
	fRSSchemaURL  = 3

	fResAttributes = 1 // Resource

	fSSScope     = 1 // ScopeSpans
	fSSSpans     = 2
	fSSSchemaURL = 3

	fScopeName    = 1 // InstrumentationScope
	fScopeVersion = 2

	fSpanTraceID    = 1 // Span
	fSpanSpanID     = 2
	fSpanTraceState = 3
	fSpanParentID   = 4
	fSpanName       = 5
	fSpanKind       = 6
	fSpanStart      = 7
	fSpanEnd        = 8
	fSpanAttributes = 9
	fSpanDroppedAtt = 10
	fSpanEvents     = 11
	fSpanLinks      = 13
	fSpanStatus     = 15
	fSpanFlags      = 16

	fEventTime       = 1 // Span.Event
	fEventName       = 2
	fEventAttributes = 3

	fLinkTraceID    = 1 // Span.Link
	fLinkSpanID     = 2
	fLinkTraceState = 3
	fLinkAttributes = 4

	fStatusMessage = 2 // Status
	fStatusCode    = 3

	fKVKey   = 1 // KeyValue
	fKVValue = 2

	fAnyString = 1 // AnyValue
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5

	fArrayValues = 1 // ArrayValue

	flagHasIsRemote = 0x100 // SpanFlags
	flagIsRemote    = 0x200
)

// encodeRequest is the ExportTraceServiceRequest of spans: one ResourceSpans per
// resource, one ScopeSpans per instrumentation scope, in the order first seen.
func encodeRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeGroup struct {
		scope instrumentation.Scope
		spans []byte
	}
	type resGroup struct {
		span   sdktrace.ReadOnlySpan // the first: its Resource
		scopes []*scopeGroup
	}
	var groups []*resGroup
	for _, s := range spans {
		var g *resGroup
		for _, x := range groups {
			if x.span.Resource() == s.Resource() {
				g = x
				break
			}
		}
		if g == nil {
			g = &resGroup{span: s}
			groups = append(groups, g)
		}
		var sg *scopeGroup
		for _, x := range g.scopes {
			if x.scope == s.InstrumentationScope() {
				sg = x
				break
			}
		}
		if sg == nil {
			sg = &scopeGroup{scope: s.InstrumentationScope()}
			g.scopes = append(g.scopes, sg)
		}
		sg.spans = appendMsg(sg.spans, fSSSpans, encodeSpan(nil, s))
	}
	var out []byte
	for _, g := range groups {
		var rs []byte
		var res []byte
		if r := g.span.Resource(); r != nil {
			for _, kv := range r.Attributes() {
				res = appendMsg(res, fResAttributes, encodeKV(nil, kv))
			}
		}
		rs = appendMsg(rs, fRSResource, res)
		for _, sg := range g.scopes {
			var ss, sc []byte
			sc = appendString(sc, fScopeName, sg.scope.Name)
			sc = appendString(sc, fScopeVersion, sg.scope.Version)
			ss = appendMsg(ss, fSSScope, sc)
			ss = append(ss, sg.spans...)
			ss = appendString(ss, fSSSchemaURL, sg.scope.SchemaURL)
			rs = appendMsg(rs, fRSScopeSpans, ss)
		}
		if r := g.span.Resource(); r != nil {
			rs = appendString(rs, fRSSchemaURL, r.SchemaURL())
		}
		out = appendMsg(out, fReqResourceSpans, rs)
	}
	return out
}

func encodeSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	b = appendString(b, fSpanTraceState, sc.TraceState().String())
	flags := uint32(sc.TraceFlags()) | flagHasIsRemote
	if p := s.Parent(); p.IsValid() {
		pid := p.SpanID()
		b = appendBytes(b, fSpanParentID, pid[:])
		if p.IsRemote() {
			flags |= flagIsRemote
		}
	}
	b = appendString(b, fSpanName, s.Name())
	if k := int(s.SpanKind()); k != 0 {
		b = pwAppendTag(b, fSpanKind, pwVarintType)
		b = pwAppendVarint(b, uint64(k)) // the SDK's and OTLP's kinds share numbers
	}
	b = appendFixed64(b, fSpanStart, unixNano(s.StartTime()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.EndTime()))
	for _, kv := range s.Attributes() {
		b = appendMsg(b, fSpanAttributes, encodeKV(nil, kv))
	}
	if n := s.DroppedAttributes(); n > 0 {
		b = pwAppendTag(b, fSpanDroppedAtt, pwVarintType)
		b = pwAppendVarint(b, uint64(n))
	}
	for _, ev := range s.Events() {
		var e []byte
		e = appendFixed64(e, fEventTime, unixNano(ev.Time))
		e = appendString(e, fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			e = appendMsg(e, fEventAttributes, encodeKV(nil, kv))
		}
		b = appendMsg(b, fSpanEvents, e)
	}
	for _, l := range s.Links() {
		var e []byte
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e = appendBytes(e, fLinkTraceID, ltid[:])
		e = appendBytes(e, fLinkSpanID, lsid[:])
		e = appendString(e, fLinkTraceState, l.SpanContext.TraceState().String())
		for _, kv := range l.Attributes {
			e = appendMsg(e, fLinkAttributes, encodeKV(nil, kv))
		}
		b = appendMsg(b, fSpanLinks, e)
	}
	st := s.Status()
	var code uint64 // OTLP: 0 unset, 1 ok, 2 error
	switch st.Code {
	case codes.Ok:
		code = 1
	case codes.Error:
		code = 2
	}
	var sb []byte
	sb = appendString(sb, fStatusMessage, st.Description)
	if code != 0 {
		sb = pwAppendTag(sb, fStatusCode, pwVarintType)
		sb = pwAppendVarint(sb, code)
	}
	b = appendMsg(b, fSpanStatus, sb)
	b = pwAppendTag(b, fSpanFlags, pwFixed32Type)
	return pwAppendFixed32(b, flags)
}

func encodeKV(b []byte, kv attribute.KeyValue) []byte {
	b = appendString(b, fKVKey, string(kv.Key))
	return appendMsg(b, fKVValue, encodeValue(nil, kv.Value))
}

func encodeValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		b = pwAppendTag(b, fAnyBool, pwVarintType)
		return pwAppendVarint(b, pwEncodeBool(v.AsBool()))
	case attribute.INT64:
		b = pwAppendTag(b, fAnyInt, pwVarintType)
		return pwAppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return appendDouble(b, fAnyDouble, v.AsFloat64())
	case attribute.STRING:
		b = pwAppendTag(b, fAnyString, pwBytesType)
		return pwAppendString(b, v.AsString())
	case attribute.BOOLSLICE:
		return appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return appendArray(b, v.AsStringSlice(), attribute.StringValue)
	default:
		b = pwAppendTag(b, fAnyString, pwBytesType)
		return pwAppendString(b, v.String())
	}
}

func appendArray[T any](b []byte, xs []T, val func(T) attribute.Value) []byte {
	var arr []byte
	for _, x := range xs {
		arr = appendMsg(arr, fArrayValues, encodeValue(nil, val(x)))
	}
	return appendMsg(b, fAnyArray, arr)
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

func appendMsg(b []byte, num pwNumber, msg []byte) []byte {
	b = pwAppendTag(b, num, pwBytesType)
	return pwAppendBytes(b, msg)
}

func appendBytes(b []byte, num pwNumber, v []byte) []byte { return appendMsg(b, num, v) }

// appendString omits an empty string, as proto3 does.
func appendString(b []byte, num pwNumber, v string) []byte {
	if v == "" {
		return b
	}
	b = pwAppendTag(b, num, pwBytesType)
	return pwAppendString(b, v)
}

func appendFixed64(b []byte, num pwNumber, v uint64) []byte {
	b = pwAppendTag(b, num, pwFixed64Type)
	return pwAppendFixed64(b, v)
}

func appendDouble(b []byte, num pwNumber, f float64) []byte {
	b = pwAppendTag(b, num, pwFixed64Type)
	return pwAppendFixed64(b, math.Float64bits(f))
}
