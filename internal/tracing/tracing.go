// Package tracing sets up OpenTelemetry tracing for the dtq worker from the standard
// OTEL_* variables: an SDK TracerProvider that batches spans to an OTLP/HTTP
// (protobuf) exporter of its own (otlp.go: the SDK's exporter costs every worker start
// about 1.35 ms of package initialisers).
//
// Tracing is off unless OTEL_TRACES_EXPORTER=otlp (the SDK's own default, otlp when the
// variable is unset, is not followed: a worker exports nothing it was not asked to).
// OTEL_SDK_DISABLED=true turns it off whatever else is set. The SDK reads the
// sampler, batch sizes and resource attributes itself; the exporter reads the
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, HEADERS, TIMEOUT, COMPRESSION and CERTIFICATE
// variables; Setup checks the ones whose mistakes the SDK would only log, so that a
// bad value stops the start with one line naming the variable, and values (a header
// may hold a secret) are never shown. The OTel global logger is silenced for the same
// reason: it would print a header it cannot parse.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/dtq/dtq/internal/envcfg"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME (or service.name in
// OTEL_RESOURCE_ATTRIBUTES) does not set one.
const DefaultServiceName = "dtq-worker"

// ShutdownTimeout bounds the flush of the spans still buffered when the worker exits.
const ShutdownTimeout = 5 * time.Second

// Provider is the worker's TracerProvider; Shutdown flushes it.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// TracerProvider is what runtime.Options.Tracer takes.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// Shutdown exports the spans still buffered and stops the exporter, within
// ShutdownTimeout (or ctx's deadline, if sooner).
func (p *Provider) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ShutdownTimeout)
	defer cancel()
	return p.tp.Shutdown(ctx)
}

// Enabled reports whether the variables turn tracing on, or a *envcfg.Error naming the
// variable whose value is not understood.
func Enabled(lookup func(string) (string, bool)) (bool, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	switch strings.ToLower(get("OTEL_SDK_DISABLED")) {
	case "true":
		return false, nil
	case "", "false":
	default:
		return false, envcfg.Bad("OTEL_SDK_DISABLED", errors.New("must be true or false"))
	}
	switch get("OTEL_TRACES_EXPORTER") {
	case "", "none":
		return false, nil
	case "otlp":
		return true, nil
	default:
		return false, envcfg.Bad("OTEL_TRACES_EXPORTER", errors.New("must be otlp or none (dtq exports OTLP only)"))
	}
}

// Check validates the variables the SDK and exporter would otherwise only log about.
// Its errors never contain a value.
func Check(lookup func(string) (string, bool)) error {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := get(k); v != "" && v != "http/protobuf" {
			return envcfg.Bad(k, errors.New("must be http/protobuf (the worker's exporter is OTLP over HTTP)"))
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v := get(k); v != "" {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return envcfg.Bad(k, errors.New("must be an http:// or https:// URL with a host (value not shown)"))
			}
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := checkHeaders(get(k)); err != nil {
			return envcfg.Bad(k, err)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"} {
		if v := get(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 600000 {
				return envcfg.Bad(k, errors.New("must be milliseconds 1..600000"))
			}
		}
	}
	sampler := get("OTEL_TRACES_SAMPLER")
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if v := get("OTEL_TRACES_SAMPLER_ARG"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				return envcfg.Bad("OTEL_TRACES_SAMPLER_ARG", errors.New("must be a ratio 0..1"))
			}
		}
	default:
		return envcfg.Bad("OTEL_TRACES_SAMPLER", errors.New("must be always_on, always_off, traceidratio or parentbased_ one of them"))
	}
	return nil
}

// checkHeaders checks the form key=value[,key=value…]; it names the entry, not its text.
func checkHeaders(v string) error {
	if v == "" {
		return nil
	}
	for i, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\"(),/:;<=>?@[\\]{}") {
			return fmt.Errorf("entry %d is not key=value (values not shown)", i+1)
		}
		if _, err := url.PathUnescape(strings.TrimSpace(val)); err != nil {
			return fmt.Errorf("entry %d: the value is not valid percent-encoding (values not shown)", i+1)
		}
	}
	return nil
}

// FromEnv returns the Provider the variables ask for, or nil when tracing is off. The
// exporter sends nothing until the first batch of spans; no connection is made here.
// Errors are *envcfg.Error naming the variable. Failed exports are logged to log (the
// error names the HTTP status or the connection's failure, never a header).
func FromEnv(ctx context.Context, lookup func(string) (string, bool), log *slog.Logger) (*Provider, error) {
	on, err := Enabled(lookup)
	if err != nil || !on {
		return nil, err
	}
	if err := Check(lookup); err != nil {
		return nil, err
	}
	exp, err := exporterFromEnv(lookup)
	if err != nil {
		return nil, err
	}
	otel.SetLogger(logr.Discard())
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported", "err", err)
	}))
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, envcfg.Bad("OTEL_RESOURCE_ATTRIBUTES", errors.New("cannot be read"))
	}
	// The sampler comes from OTEL_TRACES_SAMPLER(_ARG), read by the SDK.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: tp}, nil
}
