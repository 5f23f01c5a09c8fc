package runtime_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/function"
	"github.com/dtq/dtq/internal/heapfloor"
	"github.com/dtq/dtq/internal/redisconn"
	"github.com/dtq/dtq/runtime"
)

// floorChildEnv makes the test binary run floorChild instead of tests: the heap floor
// and the collector's count are once per process.
const floorChildEnv = "DTQ_TEST_CHILD_FLOOR"

// floorChild starts a worker (configured from the environment), waits until it ran the
// task waiting for it, and prints the collections its process made by then and the
// floor it kept; then it collects once and prints the floor it keeps after that.
func floorChild() int {
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.OsLookuper())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb, err := redisconn.Open(cfg.RedisURL, redisconn.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	gcs := ms.NumGC
	ran := make(chan struct{}, 1)
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: rdb, Registry: function.Registry(),
		Observe: func(e runtime.Event) {
			if e.Type == runtime.EventTaskSucceeded {
				select {
				case ran <- struct{}{}:
				default:
				}
			}
		}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-ran:
	case <-time.After(waitTimeout):
		fmt.Fprintln(os.Stderr, "the task did not run")
		return 1
	}
	goruntime.ReadMemStats(&ms)
	fmt.Printf("collections=%d kept=%d\n", ms.NumGC-gcs, heapfloor.Kept())
	goruntime.GC()
	deadline := time.Now().Add(waitTimeout)
	for heapfloor.Kept() == 0 && time.Now().Before(deadline) {
		waitTick()
	}
	fmt.Printf("after a collection kept=%d\n", heapfloor.Kept())
	return 0
}

// A worker's start costs no garbage collection: its heap floor
// (DTQ_WORKER_HEAP_FLOOR_MB) waits for the process's first collection, and is kept
// from then on. Placed at start, the floor set off a collection by itself in every
// start, busy or not. Run in a child process (the floor is once a process), with
// GOGC=400 so the child's own small allocations never reach a collection.
func TestWorkerStartCollectsNothingAndKeepsItsFloorAfterACollection(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.enqueue(t, client.Task{Function: "noop"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), floorChildEnv+"=1", "GOGC=400", "GOMEMLIMIT=",
		"DTQ_REDIS_URL="+e.srv.URL(), "DTQ_KEY_PREFIX="+e.prefix, "DTQ_WORKER_HEAP_FLOOR_MB=32",
		"DTQ_EVENTS_VERBOSE=true", "DTQ_LOG_LEVEL=error", "PORT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{"collections=0 kept=0\n", "after a collection kept=32\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("want %q in the child's output:\n%s", want, out)
		}
	}
}
