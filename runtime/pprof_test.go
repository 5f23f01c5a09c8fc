package runtime_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/runtime"
)

// Importing the runtime registers nothing on the caller's default mux; /debug/pprof/ is
// served only with DTQ_PPROF and a profiler the program passed.
func TestPprofOnlyWhenAskedAndPassed(t *testing.T) {
	t.Parallel()
	if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest("GET", "/debug/pprof/", nil)); pattern != "" {
		t.Fatalf("the default mux serves %q: something registered a profiler on it", pattern)
	}
	e := setup(t)
	profiler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("profile")) })
	for _, c := range []struct {
		on   string
		pass http.Handler
		want int
	}{{"false", profiler, http.StatusNotFound}, {"true", nil, http.StatusNotFound}, {"true", profiler, http.StatusOK}} {
		w, err := runtime.New(runtime.Options{Config: e.config(t, "DTQ_PPROF", c.on), Redis: e.rdb, Registry: function.Registry(), Pprof: c.pass})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		w.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/heap", nil))
		if rec.Code != c.want {
			t.Errorf("DTQ_PPROF=%s, profiler passed %v: %d, want %d", c.on, c.pass != nil, rec.Code, c.want)
		}
	}
}
