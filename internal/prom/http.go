package prom

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// contentType is the text exposition format's; the escaping parameter follows, as
// client_golang's promhttp adds it.
const contentType = "text/plain; version=0.0.4; charset=utf-8"

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Handler serves r's exposition in the text format, gzipped when the client takes
// it, as promhttp.HandlerFor does with its default options for a scraper that asks
// for text (the Prometheus default).
func Handler(r *Registry) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		b := bufPool.Get().(*bytes.Buffer)
		b.Reset()
		defer bufPool.Put(b)
		r.WriteText(b)
		h := rw.Header()
		h.Set("Content-Type", contentType+"; escaping="+escaping(req.Header.Get("Accept")))
		if negotiateGzip(req.Header.Values("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(rw)
			_, _ = zw.Write(b.Bytes())
			_ = zw.Close()
			return
		}
		_, _ = rw.Write(b.Bytes())
	})
}

// escaping is the name escaping scheme the response declares: the one an Accept
// clause names (up to the first clause text matches), else underscores. dtq's
// names need no escaping: the body is the same under every scheme.
func escaping(accept string) string {
	scheme := "underscores"
	for _, clause := range strings.Split(accept, ",") {
		parts := strings.Split(clause, ";")
		mt := strings.ToLower(strings.TrimSpace(parts[0]))
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.TrimSpace(k) == "escaping" {
				switch v = strings.TrimSpace(v); v {
				case "allow-utf-8", "underscores", "dots", "values":
					scheme = v
				}
			}
		}
		if mt == "text/plain" || mt == "text/*" || mt == "*/*" {
			break
		}
	}
	return scheme
}

// negotiateGzip chooses between identity and gzip as promhttp does (gddo's
// NegotiateContentEncoding over the offers identity, gzip): the highest quality
// wins, identity on a tie.
func negotiateGzip(values []string) bool {
	type spec struct {
		value string
		q     float64
	}
	var specs []spec
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			parts := strings.Split(item, ";")
			name := strings.ToLower(strings.TrimSpace(parts[0]))
			if name == "" {
				continue
			}
			q := 1.0
			for _, p := range parts[1:] {
				if k, qv, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.TrimSpace(k) == "q" {
					if f, err := strconv.ParseFloat(strings.TrimSpace(qv), 64); err == nil {
						q = f
					}
				}
			}
			specs = append(specs, spec{name, q})
		}
	}
	best, bestQ := "identity", -1.0
	for _, offer := range []string{"identity", "gzip"} {
		for _, s := range specs {
			if s.q > bestQ && (s.value == "*" || s.value == offer) {
				best, bestQ = offer, s.q
			}
		}
	}
	return best == "gzip" && bestQ != 0
}
