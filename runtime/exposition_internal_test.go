package runtime

import (
	"bufio"
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/redistest"
)

var updateExposition = flag.Bool("update-exposition", false, "rewrite testdata/exposition.golden from the worker's /metrics")

// exposition is the shape of a /metrics body, one line per fact: each family's TYPE
// and HELP, and the label names of each of its series (values left out: they change
// from run to run). Sorted, so the order families come in does not matter.
func exposition(t *testing.T, body string) []string {
	t.Helper()
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "# HELP "), strings.HasPrefix(line, "# TYPE "):
			seen[line] = true
			continue
		case strings.HasPrefix(line, "#"):
			t.Fatalf("unexpected comment line %q", line)
		}
		name, rest, hasLabels := strings.Cut(line, "{")
		var labels []string
		if hasLabels {
			set, _, ok := strings.Cut(rest, "}")
			if !ok {
				t.Fatalf("unterminated labels in %q", line)
			}
			for _, kv := range splitLabels(set) {
				k, v, _ := strings.Cut(kv, "=")
				if k == "le" || k == "quantile" { // the buckets and quantiles are part of the shape
					k += "=" + v
				}
				labels = append(labels, k)
			}
		} else {
			name, _, _ = strings.Cut(line, " ")
		}
		slices.Sort(labels)
		seen["series "+name+" {"+strings.Join(labels, ",")+"}"] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// splitLabels splits `a="x",b="y,z"` at the commas between pairs.
func splitLabels(s string) []string {
	var out []string
	inQuote, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// A running worker's /metrics keeps its exposition: every family's name, TYPE and
// HELP, and the labels of its series, the Go runtime's and the process's included.
// Every metric of the worker is touched, so label vectors show their series too.
func TestMetricsExpositionIsPinned(t *testing.T) {
	srv := redistest.Shared(t)
	pw := newPassWorkerOn(t, srv, "default")
	w := pw.Worker
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	w.metrics.count("fn", OutcomeSucceeded)
	w.metrics.fn("fn").duration.Observe(0.01)
	w.metrics.pickup.Observe(0.001)
	w.metrics.loopRestarts.WithLabelValues("poller").Inc()
	w.metrics.redisErrors.WithLabelValues("read").Inc()
	w.metrics.deadTrimmed.WithLabelValues("default").Add(2)
	w.metrics.eventsDropped.Inc()
	w.metrics.scheduled.Add(1)
	w.metrics.roundTrips.Inc()
	w.metrics.handoffs.Inc()
	w.metrics.rescued.Add(1)
	w.metrics.inflight.Set(0)
	w.metrics.draining.Set(0)

	const contentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
	scrape := func() string {
		rec := httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest("GET", PathMetrics, nil))
		if rec.Code != 200 {
			t.Fatalf("GET /metrics = %d", rec.Code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != contentType {
			t.Fatalf("Content-Type = %q, want %q", ct, contentType)
		}
		return rec.Body.String()
	}
	// The Go runtime and process metrics come once the worker started.
	deadline := time.Now().Add(30 * time.Second)
	body := scrape()
	for !strings.Contains(body, "\ngo_goroutines ") || !strings.Contains(body, "\nprocess_start_time_seconds ") {
		if time.Now().After(deadline) {
			t.Fatalf("no Go runtime or process metrics after 30s:\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
		body = scrape()
	}
	got := exposition(t, body)

	golden := filepath.Join("testdata", "exposition.golden")
	if *updateExposition {
		if err := os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("/metrics lacks: %s", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("/metrics has more than %s: %s", golden, l)
		}
	}
	if t.Failed() {
		t.Logf("body:\n%s", body)
	}
}
