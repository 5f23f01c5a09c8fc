package prom

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The same metrics, the same observations: the body is byte for byte the one
// client_golang's registry and promhttp write, and so are the headers.
func TestExpositionMatchesClientGolang(t *testing.T) {
	l := Labels{"worker_id": "w-1", "a_first": "x\"y\\z\nw"}
	buckets := []float64{.0005, .001, .0025, .01, 1, 2.5, 300}
	mine := NewRegistry()
	theirs := prometheus.NewRegistry()

	c := NewCounter(CounterOpts{Name: "t_counter_total", Help: "A counter\\ with\nnewline.", ConstLabels: l})
	pc := prometheus.NewCounter(prometheus.CounterOpts{Name: "t_counter_total", Help: "A counter\\ with\nnewline.", ConstLabels: prometheus.Labels(l)})
	g := NewGauge(GaugeOpts{Name: "t_gauge", Help: "A gauge.", ConstLabels: l})
	pg := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_gauge", Help: "A gauge.", ConstLabels: prometheus.Labels(l)})
	h := NewHistogram(HistogramOpts{Name: "t_hist_seconds", Help: "A histogram.", ConstLabels: l, Buckets: buckets})
	ph := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t_hist_seconds", Help: "A histogram.", ConstLabels: prometheus.Labels(l), Buckets: buckets})
	cv := NewCounterVec(CounterOpts{Name: "t_vec_total", Help: "A vector.", ConstLabels: l}, []string{"zz", "b"})
	pcv := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_vec_total", Help: "A vector.", ConstLabels: prometheus.Labels(l)}, []string{"zz", "b"})
	hv := NewHistogramVec(HistogramOpts{Name: "t_hvec_seconds", Help: "A histogram vector.", ConstLabels: l, Buckets: buckets}, []string{"function"})
	phv := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "t_hvec_seconds", Help: "A histogram vector.", ConstLabels: prometheus.Labels(l), Buckets: buckets}, []string{"function"})
	empty := NewCounterVec(CounterOpts{Name: "t_empty_total", Help: "No series yet."}, []string{"op"})
	pempty := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_empty_total", Help: "No series yet."}, []string{"op"})
	mine.MustRegister(hv, c, g, h, cv, empty)
	theirs.MustRegister(phv, pc, pg, ph, pcv, pempty)

	for _, v := range []float64{1, 2, 0.5, 1e6, 1e-7, 3} {
		c.Add(v)
		pc.Add(v)
	}
	c.Inc()
	pc.Inc()
	for _, v := range []float64{-1, 0, 1, 0.125, 1e21, math.Inf(1), math.NaN()} {
		g.Set(v)
		pg.Set(v)
		if got, want := body(t, Handler(mine), ""), body(t, promhttp.HandlerFor(theirs, promhttp.HandlerOpts{}), ""); got != want {
			t.Fatalf("gauge %v:\n got:\n%s\nwant:\n%s", v, got, want)
		}
	}
	g.Set(42.5)
	pg.Set(42.5)
	for _, v := range []float64{0, .0005, .0006, .001, 0.3, 1, 2, 299, 300, 301, 1e9} {
		h.Observe(v)
		ph.Observe(v)
		for _, fn := range []string{"b", "a", "c"} {
			hv.WithLabelValues(fn).Observe(v * 2)
			phv.WithLabelValues(fn).Observe(v * 2)
		}
	}
	for _, lv := range [][2]string{{"2", "b"}, {"1", "z"}, {"1", "a"}, {"", "q"}, {"10", "b"}} {
		cv.WithLabelValues(lv[0], lv[1]).Inc()
		pcv.WithLabelValues(lv[0], lv[1]).Inc()
	}
	cv.WithLabelValues("1", "a").Add(2.5)
	pcv.WithLabelValues("1", "a").Add(2.5)

	for _, accept := range []string{"",
		"text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
		"text/plain;version=0.0.4;escaping=allow-utf-8",
		"text/plain;version=0.0.4;escaping=values;q=0.5,*/*;q=0.1"} {
		for _, enc := range []string{"", "gzip", "gzip, identity", "identity;q=0.5, gzip", "gzip;q=0"} {
			got, gotH := get(t, Handler(mine), accept, enc)
			want, wantH := get(t, promhttp.HandlerFor(theirs, promhttp.HandlerOpts{}), accept, enc)
			if got != want {
				t.Fatalf("Accept %q, Accept-Encoding %q:\n got:\n%s\nwant:\n%s", accept, enc, got, want)
			}
			for _, k := range []string{"Content-Type", "Content-Encoding"} {
				if gotH[k] != wantH[k] {
					t.Fatalf("Accept %q, Accept-Encoding %q: %s %q, want %q", accept, enc, k, gotH[k], wantH[k])
				}
			}
		}
	}
}

func body(t *testing.T, h http.Handler, accept string) string {
	t.Helper()
	s, _ := get(t, h, accept, "")
	return s
}

// get serves one GET /metrics and returns the body (gunzipped) and the headers.
func get(t *testing.T, h http.Handler, accept, encoding string) (string, map[string]string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var r io.Reader = rec.Body
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String(), map[string]string{"Content-Type": rec.Header().Get("Content-Type"), "Content-Encoding": rec.Header().Get("Content-Encoding")}
}

// The Go runtime's and the process's families are client_golang's default ones: the
// same HELP and TYPE lines, the same series with the same labels, in the same order.
func TestRuntimeFamiliesMatchClientGolang(t *testing.T) {
	mine := NewRegistry()
	mine.MustRegister(NewGoCollector(), NewProcessCollector())
	theirs := prometheus.NewRegistry()
	theirs.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	got, want := shape(body(t, Handler(mine), "")), shape(body(t, promhttp.HandlerFor(theirs, promhttp.HandlerOpts{}), ""))
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	// and the values that do not move between two reads agree
	for _, name := range []string{"go_info", "go_gc_gogc_percent", "go_gc_gomemlimit_bytes", "go_sched_gomaxprocs_threads",
		"process_max_fds", "process_virtual_memory_max_bytes", "process_start_time_seconds"} {
		if g, w := line(body(t, Handler(mine), ""), name), line(body(t, promhttp.HandlerFor(theirs, promhttp.HandlerOpts{}), ""), name); g != w {
			t.Errorf("%s: got %q, want %q", name, g, w)
		}
	}
}

// shape is the body without the values (a quantile or le label is kept).
func shape(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			out = append(out, l)
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		out = append(out, l[:i])
	}
	return strings.Join(out, "\n")
}

// line is the sample line of an unlabelled (or go_info) family.
func line(body, name string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
			return l
		}
	}
	return ""
}
