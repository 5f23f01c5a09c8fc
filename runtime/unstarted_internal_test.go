package runtime

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/redistest"
)

// unstartedWorker is a worker on the shared Redis under the test's own key prefix,
// built and never run: the test drives its parts by hand. reg and log may be nil; env
// adds variables, name then value.
func unstartedWorker(t *testing.T, reg *Registry, log *slog.Logger, env ...string) *Worker {
	t.Helper()
	srv := redistest.Shared(t)
	vars := map[string]string{"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t)}
	for i := 0; i+1 < len(env); i += 2 {
		vars[env[i]] = env[i+1]
	}
	cfg, err := LoadConfig(context.Background(), envconfig.MapLookuper(vars))
	if err != nil {
		t.Fatal(err)
	}
	if reg == nil {
		reg = NewRegistry()
	}
	w, err := New(Options{Config: cfg, Redis: srv.Client(t), Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.poller.reader.Close()
		w.events.Stop()
	})
	return w
}
