package runtime_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/runtime"
)

// proxied is a worker's setting behind a fault proxy: its client (of the options given,
// through the proxy), a client straight to Redis and one of dtq's over it, a recorder,
// and a configuration whose visibility timeout and idle block (60 s) outlast the test.
type proxied struct {
	proxy  *chaos.Proxy
	rdb    *redis.Client
	direct *redis.Client
	c      *client.Client
	rec    *recorder
	prefix string
	cfg    runtime.Config
}

func newProxied(t *testing.T, o *redis.Options) proxied {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	proxy, err := chaos.NewProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	o.Addr = proxy.Addr()
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	x := proxied{proxy: proxy, rdb: rdb, direct: srv.Client(t), rec: newRecorder(), prefix: redistest.Prefix(t)}
	x.c = client.New(x.direct, client.Options{Prefix: x.prefix})
	x.cfg = testConfig(t, "redis://"+proxy.Addr(), x.prefix, map[string]string{
		"DTQ_VISIBILITY_TIMEOUT_S": "60", "DTQ_HEARTBEAT_INTERVAL_S": "5", "DTQ_POLL_BLOCK_MS": "60000"})
	return x
}

// awaitBlocked waits until a client of direct's server is in a blocking XREADGROUP.
func awaitBlocked(t *testing.T, direct *redis.Client) {
	t.Helper()
	eventually(t, "the worker to block", func() bool {
		clients, err := direct.ClientList(t.Context()).Result()
		return err == nil && strings.Contains(clients, "cmd=xreadgroup")
	})
}

// TestUnansweredClaimIsResent: Redis runs a claim, its reply never reaches the worker,
// and go-redis does not resend it (here: no retries at all), so the poll loop fails and
// restarts. Its next call on the queue is that same call again, which the receipt
// answers: the task it claimed starts at once, on its first attempt, instead of waiting
// for a reaper after the visibility timeout (60 s here, past the test's deadline).
func TestUnansweredClaimIsResent(t *testing.T) {
	t.Parallel()
	// A long block: no claim call but the one the task's arrival causes.
	x := newProxied(t, &redis.Options{MaxRetries: -1})
	proxy, direct, c, rec := x.proxy, x.direct, x.c, x.rec
	w := startWorker(t, x.rdb, x.cfg, nil, rec)
	<-w.w.Fetched()
	// The first fetch may still be on its way back; the next read-mode claim is the
	// one the blocking read's delivery causes.
	awaitBlocked(t, direct)
	// The path under test is the claim of an entry the blocking read delivered: take the
	// idle worker's hand-off registration away, so the enqueue does not start the task.
	if err := direct.Del(t.Context(), keys.New(x.prefix).Queue("default").Waiting()).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.CutOnReply(chaos.Contains("EVALSHA", ":paused", "read"), 1)
	id, _, err := c.Enqueue(t.Context(), client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the task to succeed", is(runtime.EventTaskSucceeded, id))
	if proxy.Armed() != 0 {
		t.Fatal("the claim's reply was never cut: the test tested nothing")
	}
	ti, err := c.Get(t.Context(), "default", id)
	if err != nil || ti.Status != "succeeded" || ti.Attempt != 1 || ti.Reclaims != 0 {
		t.Fatalf("task %+v %v: want succeeded on attempt 1, never reclaimed", ti, err)
	}
}

// TestLostIdleReadIsTakenAgain: Redis serves the idle read an entry, or a hand-off row
// of the worker's inbox, and the reply never reaches the worker (its connection drops
// as it comes). The entry (or the row and the task's entry) is pending for the worker,
// and no reaper would take it before the visibility timeout (60 s here, past the
// test's deadline): the worker's next pass finds it among its own pending entries,
// beside the one it is running, and starts it, once.
func TestLostIdleReadIsTakenAgain(t *testing.T) {
	t.Parallel()
	t.Run("entry", func(t *testing.T) { t.Parallel(); lostIdleRead(t, false) })
	t.Run("hand-off", func(t *testing.T) { t.Parallel(); lostIdleRead(t, true) })
}

func lostIdleRead(t *testing.T, handoff bool) {
	x := newProxied(t, &redis.Options{})
	proxy, direct, c, rec, prefix := x.proxy, x.direct, x.c, x.rec, x.prefix
	release := make(chan struct{})
	reg := runtime.NewRegistry()
	reg.Register("hold", func(ctx context.Context, _ *runtime.Task) ([]byte, error) {
		<-release
		return nil, nil
	}, runtime.FuncOptions{})
	reg.Register("noop", func(ctx context.Context, _ *runtime.Task) ([]byte, error) { return nil, nil }, runtime.FuncOptions{})
	// One task runs through it all: its entry is pending for the worker too.
	held, _, err := c.Enqueue(t.Context(), client.Task{Queue: "default", Function: "hold"})
	if err != nil {
		t.Fatal(err)
	}
	// The worker's first idle read is the one whose reply is cut (the command itself:
	// a script's text sent with EVAL names XREADGROUP too).
	proxy.CutOnReply(chaos.Command("XREADGROUP", "BLOCK"), 1)
	startWorker(t, x.rdb, x.cfg, reg, rec)
	rec.wait(t, "the held task to start", is(runtime.EventTaskStarted, held))
	awaitBlocked(t, direct)
	waiting := keys.New(prefix).Queue("default").Waiting()
	if handoff {
		if n, err := direct.ZCard(t.Context(), waiting).Result(); err != nil || n != 1 {
			t.Fatalf("%d workers waiting for a hand-off (%v), want the one", n, err)
		}
	} else if err := direct.Del(t.Context(), waiting).Err(); err != nil {
		t.Fatal(err) // an entry read from the band is the path under test
	}
	id, _, err := c.Enqueue(t.Context(), client.Task{Queue: "default", Function: "noop"})
	if err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the task whose delivery was lost to succeed", is(runtime.EventTaskSucceeded, id))
	if proxy.Armed() != 0 {
		t.Fatal("the idle read's reply was never cut: the test tested nothing")
	}
	close(release)
	rec.wait(t, "the held task to succeed", is(runtime.EventTaskSucceeded, held))
	for _, task := range []string{id, held} {
		ti, err := c.Get(t.Context(), "default", task)
		if err != nil || ti.Status != "succeeded" || ti.Attempt != 1 || ti.Reclaims != 0 {
			t.Fatalf("task %+v %v: want succeeded on attempt 1, never reclaimed", ti, err)
		}
	}
	if n := rec.count(is(runtime.EventTaskStarted, "")); n != 2 {
		t.Fatalf("%d starts, want 2", n)
	}
}
