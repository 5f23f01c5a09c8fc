package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

// cronSetup is a client on a fixed clock, with the raw connection and key space.
func cronSetup(t *testing.T, now time.Time) (*client.Client, *redis.Client, keys.Space) {
	t.Helper()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	p := redistest.Prefix(t)
	return client.New(rdb, client.Options{Prefix: p, MaxPayload: 1024, Now: func() time.Time { return now }}), rdb, keys.New(p)
}

var cronNow = time.Date(2027, 3, 1, 10, 0, 30, 0, time.UTC)

func TestCronAddListPauseResumeRemove(t *testing.T) {
	t.Parallel()
	c, rdb, ks := cronSetup(t, cronNow)
	ctx := context.Background()
	ci, err := c.AddCron(ctx, client.CronEntry{Name: "report", Spec: "*/15 * * * *", Queue: "cq", Function: "build",
		Payload: `{"k":1}`, Priority: 7, MaxRetries: client.Retries(2)})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2027, 3, 1, 10, 15, 0, 0, time.UTC).UnixMilli()
	if ci.NextMS != want || ci.Missed != client.MissedOnce || ci.Paused || ci.UpdatedMS != cronNow.UnixMilli() {
		t.Fatalf("added %+v, want next %d, missed once, not paused", ci, want)
	}
	// the queue is known, so the leader serves it
	if ok, _ := rdb.SIsMember(ctx, ks.Queues(), "cq").Result(); !ok {
		t.Error("the entry's queue is not in the queue set")
	}
	if _, err := c.AddCron(ctx, client.CronEntry{Name: "tz", Spec: "CRON_TZ=America/New_York 0 9 * * *", Queue: "cq", Function: "f", Missed: client.MissedSkip}); err != nil {
		t.Fatal(err)
	}
	ls, err := c.CronList(ctx)
	if err != nil || len(ls) != 2 || ls[0].Name != "report" || ls[1].Name != "tz" {
		t.Fatalf("list %+v %v", ls, err)
	}
	// 09:00 in New York on 1 March 2027 is 14:00 UTC (EST)
	if ls[1].NextMS != time.Date(2027, 3, 1, 14, 0, 0, 0, time.UTC).UnixMilli() || ls[1].Missed != client.MissedSkip {
		t.Errorf("tz entry %+v, want next 14:00 UTC and missed skip", ls[1])
	}
	if err := c.PauseCron(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	ci, _ = c.Cron(ctx, "report")
	if !ci.Paused || ci.NextMS != 0 {
		t.Errorf("paused entry %+v, want paused with no next tick", ci)
	}
	if n, _ := rdb.ZCard(ctx, ks.Queue("cq").Cron()).Result(); n != 1 {
		t.Errorf("cron zset holds %d, want 1 (the paused entry left it)", n)
	}
	if err := c.PauseCron(ctx, "report"); err != nil {
		t.Errorf("pausing a paused entry: %v", err)
	}
	if err := c.ResumeCron(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	if ci, _ = c.Cron(ctx, "report"); ci.Paused || ci.NextMS != want {
		t.Errorf("resumed entry %+v, want next %d", ci, want)
	}
	if err := c.RemoveCron(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cron(ctx, "report"); !errors.Is(err, client.ErrCronNotFound) {
		t.Errorf("removed entry read: %v, want ErrCronNotFound", err)
	}
	if s, _ := rdb.ZScore(ctx, ks.Queue("cq").Cron(), "report").Result(); s != 0 {
		t.Errorf("removed entry still in the zset at %v", s)
	}
}

// Re-adding keeps a due tick unless the spec changed; declaring keeps paused and next.
func TestCronReAddAndDeclare(t *testing.T) {
	t.Parallel()
	c, rdb, ks := cronSetup(t, cronNow)
	ctx := context.Background()
	e := client.CronEntry{Name: "e", Spec: "@every 1m", Queue: "cq", Function: "f"}
	if _, err := c.AddCron(ctx, e); err != nil {
		t.Fatal(err)
	}
	z := ks.Queue("cq").Cron()
	due := cronNow.Add(-time.Second).UnixMilli() // a tick due and not yet fired
	rdb.ZAdd(ctx, z, redis.Z{Score: float64(due), Member: "e"})
	e.Payload = "new"
	if ci, err := c.AddCron(ctx, e); err != nil || ci.NextMS != due || ci.Payload != "new" {
		t.Fatalf("re-add with the same spec: %+v %v; want the due tick %d kept", ci, err, due)
	}
	if ci, err := c.DeclareCron(ctx, e); err != nil || ci.NextMS != due {
		t.Fatalf("declare unchanged: %+v %v; want the due tick kept", ci, err)
	}
	if err := c.PauseCron(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	if ci, err := c.DeclareCron(ctx, e); err != nil || !ci.Paused {
		t.Fatalf("declare over a paused entry: %+v %v; want it still paused", ci, err)
	}
	e.Function = "g"
	if ci, err := c.DeclareCron(ctx, e); err != nil || !ci.Paused || ci.Function != "g" || ci.NextMS != 0 {
		t.Fatalf("declare a changed paused entry: %+v %v; want it changed and still paused", ci, err)
	}
	e.Spec = "@every 2m"
	ci, err := c.AddCron(ctx, e) // add unpauses and recomputes
	if err != nil || ci.Paused || ci.NextMS != cronNow.Truncate(time.Second).Add(2*time.Minute).UnixMilli() {
		t.Fatalf("add a new spec: %+v %v", ci, err)
	}
	// moving the entry to another queue takes it out of the first queue's zset
	e.Queue = "other"
	if _, err := c.AddCron(ctx, e); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.ZCard(ctx, z).Result(); n != 0 {
		t.Errorf("the old queue's zset holds %d after the move", n)
	}
	if n, _ := rdb.ZCard(ctx, ks.Queue("other").Cron()).Result(); n != 1 {
		t.Errorf("the new queue's zset holds %d after the move, want 1", n)
	}
}

// Bad input gets a clear error and changes nothing.
func TestCronBadInput(t *testing.T) {
	t.Parallel()
	c, rdb, ks := cronSetup(t, cronNow)
	ctx := context.Background()
	good := client.CronEntry{Name: "ok", Spec: "@hourly", Queue: "cq", Function: "f"}
	for _, tc := range []struct {
		name, want string
		edit       func(e *client.CronEntry)
	}{
		{"bad spec", "cron spec", func(e *client.CronEntry) { e.Spec = "61 * * * *" }},
		{"six fields", "cron spec", func(e *client.CronEntry) { e.Spec = "0 0 * * * *" }},
		{"empty spec", "cron spec", func(e *client.CronEntry) { e.Spec = "" }},
		{"bad every", "cron spec", func(e *client.CronEntry) { e.Spec = "@every soon" }},
		{"bad zone", "cron spec", func(e *client.CronEntry) { e.Spec = "CRON_TZ=Mars/Olympus 0 0 * * *" }},
		{"never fires", "never fires", func(e *client.CronEntry) { e.Spec = "0 0 30 2 *" }},
		{"unknown missed policy", "missed policy", func(e *client.CronEntry) { e.Missed = "twice" }},
		{"bad name", "cron entry name", func(e *client.CronEntry) { e.Name = "a b" }},
		{"empty name", "cron entry name", func(e *client.CronEntry) { e.Name = "" }},
		{"long name", "more than 64", func(e *client.CronEntry) { e.Name = strings.Repeat("n", 65) }},
		{"bad queue", "queue name", func(e *client.CronEntry) { e.Queue = "a{b}" }},
		{"no function", "function", func(e *client.CronEntry) { e.Function = "" }},
		{"priority", "priority", func(e *client.CronEntry) { e.Priority = 10 }},
		{"payload", "over the limit", func(e *client.CronEntry) { e.Payload = strings.Repeat("x", 1025) }},
		{"timeout", "timeout", func(e *client.CronEntry) { e.TimeoutMS = -1 }},
		{"binary payload", "UTF-8", func(e *client.CronEntry) { e.Payload = "\xff\xfe" }},
	} {
		e := good
		tc.edit(&e)
		_, err := c.AddCron(ctx, e)
		if err == nil || !(errors.Is(err, client.ErrInvalid) || errors.Is(err, client.ErrPayloadTooBig)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want an invalid-input error naming %q", tc.name, err, tc.want)
		}
	}
	if n, _ := rdb.HLen(ctx, ks.Cron()).Result(); n != 0 {
		t.Errorf("bad adds stored %d entries", n)
	}
	for name, op := range map[string]func(context.Context, string) error{
		"remove": c.RemoveCron, "pause": c.PauseCron, "resume": c.ResumeCron,
	} {
		if err := op(ctx, "nosuch"); !errors.Is(err, client.ErrCronNotFound) {
			t.Errorf("%s of an unknown entry: %v, want ErrCronNotFound", name, err)
		}
		if err := op(ctx, "bad name"); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s with a bad name: %v, want ErrInvalid", name, err)
		}
	}
}

func TestCronTaskID(t *testing.T) {
	t.Parallel()
	id := client.CronTaskID("a-b.c", 1_800_000_000_000)
	if id != "cron-a-b.c-1800000000000" {
		t.Fatalf("id %q", id)
	}
	if n, tick, ok := client.CronTick(id); !ok || n != "a-b.c" || tick != 1_800_000_000_000 {
		t.Errorf("CronTick(%q) = %q %d %v", id, n, tick, ok)
	}
	for _, bad := range []string{"cron-x", "task-1", "cron--5", "cron-x-y"} {
		if _, _, ok := client.CronTick(bad); ok {
			t.Errorf("CronTick(%q) ok", bad)
		}
	}
}

// dtq inspect queue counts the queue's active entries; a due tick counts as due.
func TestQueueInfoCountsCron(t *testing.T) {
	t.Parallel()
	c, rdb, ks := cronSetup(t, cronNow)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := c.AddCron(ctx, client.CronEntry{Name: n, Spec: "@hourly", Queue: "iq", Function: "f"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.PauseCron(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, ks.Queue("iq").Cron(), redis.Z{Score: float64(cronNow.Add(-time.Second).UnixMilli()), Member: "a"})
	qi, err := c.Queue(ctx, "iq")
	if err != nil || qi.Cron != 2 || qi.DueNow != 1 {
		t.Fatalf("queue info %+v %v; want 2 active entries, 1 due", qi, err)
	}
}
